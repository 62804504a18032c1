// Package docs holds the checks of the project's Markdown documents, and
// no code: every heading the README had before it was split into docs/
// still has a home (testdata/readme-headings.txt is that list, frozen),
// and every relative link in README.md, docs/, SECURITY.md, CHANGELOG.md,
// PROJECT.md and intent/ names a file that exists and, with an anchor, a
// heading of that file as GitHub spells its anchor.
package docs
