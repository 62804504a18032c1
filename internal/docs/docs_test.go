package docs

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// root is the repository's top, from this package's directory.
var root = filepath.Join("..", "..")

// maxReadmeLines is the newcomer's README's bound (issue 35): the rest
// lives in docs/.
const maxReadmeLines = 250

// linked are the documents whose relative links must resolve, as globs
// under the root.
var linked = []string{"README.md", "docs/*.md", "SECURITY.md", "CHANGELOG.md", "PROJECT.md", "intent/*.md"}

// homes are the documents where a heading of the old README may live.
var homes = []string{"README.md", "docs/*.md"}

// doc is one Markdown file as the checks read it: its headings' texts and
// their anchors, and its links, each outside fenced code.
type doc struct {
	headings []string
	anchors  map[string]bool
	links    []link
}

type link struct {
	line   int
	target string
}

var (
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	codeSpan   = regexp.MustCompile("(`+)[^`]*?(`+)")
	// inlineLink is [text](target) or ![alt](target), with an optional
	// title; the text holds no brackets (code spans are blanked first).
	inlineLink = regexp.MustCompile(`\[[^\[\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	mdLinkText = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// read parses path: ATX headings and links outside fenced code blocks
// (``` or ~~~), code spans left out of the link search.
func read(t *testing.T, path string) doc {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	d := doc{anchors: map[string]bool{}}
	seen := map[string]int{}
	var fence string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]+" \t") == "" {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			text := strings.TrimSpace(m[2])
			d.headings = append(d.headings, text)
			a := slug(text)
			if k := seen[a]; k > 0 {
				seen[a]++
				a += "-" + strconv.Itoa(k)
			} else {
				seen[a] = 1
			}
			d.anchors[a] = true
		}
		plain := codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(plain, -1) {
			d.links = append(d.links, link{n, m[1]})
		}
		if m := refLink.FindStringSubmatch(plain); m != nil {
			d.links = append(d.links, link{n, m[1]})
		}
	}
	require.NoError(t, sc.Err())
	return d
}

// slug is the anchor GitHub gives a heading: its text without markup,
// lower case, every character that is not a letter, mark, digit,
// connector, hyphen or space dropped, spaces made hyphens.
func slug(heading string) string {
	text := mdLinkText.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-', unicode.IsLetter(r), unicode.IsDigit(r), unicode.IsNumber(r), unicode.IsMark(r), unicode.In(r, unicode.Pc):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func glob(t *testing.T, patterns []string) []string {
	t.Helper()
	var out []string
	for _, p := range patterns {
		m, err := filepath.Glob(filepath.Join(root, p))
		require.NoError(t, err)
		require.NotEmpty(t, m, "no document matches %s", p)
		out = append(out, m...)
	}
	return out
}

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Past one machine: `serve --nats`":                                   "past-one-machine-serve---nats",
		"Fleets: `spawn_tasks`":                                              "fleets-spawn_tasks",
		"Checking the agents: `symm-mcp doctor`":                             "checking-the-agents-symm-mcp-doctor",
		"One server per host, or one daemon for all: `--shared` and `serve`": "one-server-per-host-or-one-daemon-for-all---shared-and-serve",
		"At scale: `make bench-scale`":                                       "at-scale-make-bench-scale",
		"Limits and what symm-mcp does not promise":                          "limits-and-what-symm-mcp-does-not-promise",
		"[Linked](x.md) heading":                                             "linked-heading",
	} {
		assert.Equal(t, want, slug(heading), heading)
	}
}

// TestReadmeHeadingsHaveAHome: every heading the README had before the
// split is a heading, at any level, of README.md or a file of docs/.
func TestReadmeHeadingsHaveAHome(t *testing.T) {
	frozen, err := os.ReadFile(filepath.Join("testdata", "readme-headings.txt"))
	require.NoError(t, err)
	have := map[string][]string{}
	for _, path := range glob(t, homes) {
		for _, h := range read(t, path).headings {
			have[h] = append(have[h], path)
		}
	}
	var n int
	for _, line := range strings.Split(strings.TrimSpace(string(frozen)), "\n") {
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		require.NotEmpty(t, text, "testdata line %q", line)
		n++
		assert.NotEmpty(t, have[text], "the README's heading %q has no home in README.md or docs/*.md", text)
	}
	assert.Equal(t, 31, n, "the frozen list is the old README's 31 headings")
}

// TestRelativeLinksResolve: each relative link names an existing file
// and, with an anchor into a Markdown file, one of its headings.
func TestRelativeLinksResolve(t *testing.T) {
	docs := map[string]doc{}
	parsed := func(path string) doc {
		d, ok := docs[path]
		if !ok {
			d = read(t, path)
			docs[path] = d
		}
		return d
	}
	var checked int
	for _, path := range glob(t, linked) {
		for _, l := range parsed(path).links {
			if l.target == "" || strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			checked++
			where := path + ":" + strconv.Itoa(l.line) + ": " + l.target
			file, anchor, _ := strings.Cut(l.target, "#")
			target := path
			if file != "" {
				target = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
				if _, err := os.Stat(target); err != nil {
					assert.NoError(t, err, "%s: the file does not exist", where)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			assert.True(t, parsed(target).anchors[anchor], "%s: no heading of %s has the anchor #%s", where, target, anchor)
		}
	}
	assert.Positive(t, checked, "the documents hold relative links")
}

// TestReadmeIsShort: the README is what a newcomer reads first.
func TestReadmeIsShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	assert.LessOrEqual(t, strings.Count(string(b), "\n"), maxReadmeLines, "README.md lines")
}

// TestBrokenLinksAreFound: the checks see what they are for, on a
// document written here.
func TestBrokenLinksAreFound(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.md")
	require.NoError(t, os.WriteFile(path, []byte("# A `b`: c\n\n## A `b`: c\n\n```sh\n# not a heading [x](nowhere.md)\n```\n"+
		"See [y](#a-b-c-1), `[z](in-code.md)` and [w](other.md#x).\n[ref]: ref.md\n"), 0o600))
	d := read(t, path)
	assert.Equal(t, []string{"A `b`: c", "A `b`: c"}, d.headings)
	assert.Equal(t, map[string]bool{"a-b-c": true, "a-b-c-1": true}, d.anchors)
	assert.Equal(t, []link{{8, "#a-b-c-1"}, {8, "other.md#x"}, {9, "ref.md"}}, d.links)
}
