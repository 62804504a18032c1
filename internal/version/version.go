// Package version says which build of symm-mcp is running: the release
// version and commit a release build is linked with, else what the Go
// toolchain recorded in the binary (the module version of `go install
// ...@vX.Y.Z`, the commit of a build in a checkout).
//
// Every place that shows the version (--version, status, doctor, the MCP
// serverInfo, the ACP clientInfo, the live view) shows String, so that
// they agree.
package version

import (
	"runtime/debug"
	"strings"
)

// Set at link time by release builds (make dist):
//
//	-ldflags "-X github.com/symm-mcp/symm-mcp/internal/version.version=v1.2.3
//	          -X github.com/symm-mcp/symm-mcp/internal/version.commit=<sha>"
//
// The linker writes them; nothing else does.
var version, commit string

// Dev is the version of a build that knows no release: a build in a
// checkout, or one without any build information.
const Dev = "v0.0.0-dev"

// Info is what a build knows of itself.
type Info struct {
	// Version is the release (v1.2.3), a Go module version (a
	// pseudo-version for `go install ...@<commit>`), or Dev.
	Version string
	// Commit is the VCS revision built, "" when unknown (a build from a
	// module zip has none).
	Commit string
	// Modified: the checkout had changes that were not committed.
	Modified bool
}

// Get is this binary's Info.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, commit, bi)
}

// String is the one version string: Version, with the short commit (and
// "-dirty" for a modified checkout) as semver build metadata when a
// commit is known, e.g. v1.2.3+0123456789ab or v0.0.0-dev+0123456789ab-dirty.
func String() string { return Get().String() }

// String renders i as described at the package's String.
func (i Info) String() string {
	if i.Commit == "" {
		return i.Version
	}
	meta := i.Commit[:min(len(i.Commit), 12)]
	if i.Modified {
		meta += "-dirty"
	}
	sep := "+"
	if strings.Contains(i.Version, "+") { // already has build metadata
		sep = "."
	}
	return i.Version + sep + meta
}

// resolve decides the Info from the link-time values and the build
// information (nil when the binary has none).
func resolve(linkVersion, linkCommit string, bi *debug.BuildInfo) Info {
	var rev string
	var modified bool
	var main string
	if bi != nil {
		main = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if linkVersion != "" {
		// A release build: its own words. The commit it was given, else
		// the toolchain's (a release build may run with -buildvcs=false).
		if linkCommit == "" {
			return Info{Version: linkVersion, Commit: rev, Modified: modified}
		}
		return Info{Version: linkVersion, Commit: linkCommit}
	}
	if rev != "" {
		// A build in a checkout. Go stamps a tagged, clean commit with
		// its tag, anything else with a pseudo-version (and +dirty): only
		// the tag names a release.
		if isRelease(main) {
			return Info{Version: main, Commit: rev, Modified: modified}
		}
		return Info{Version: Dev, Commit: rev, Modified: modified}
	}
	// No VCS information: built from a module zip (go install ...@v1.2.3,
	// or @<commit> with a pseudo-version), or without any information.
	if main == "" || main == "(devel)" {
		return Info{Version: Dev}
	}
	return Info{Version: main}
}

// isRelease reports whether v is a tag's version: vMAJOR.MINOR.PATCH with
// an optional pre-release, neither a pseudo-version nor one with build
// metadata (Go's +dirty).
func isRelease(v string) bool {
	if !strings.HasPrefix(v, "v") || strings.Contains(v, "+") {
		return false
	}
	core, pre, _ := strings.Cut(v[1:], "-")
	if parts := strings.Split(core, "."); len(parts) != 3 || !allDigits(parts) {
		return false
	}
	return !isPseudo(pre)
}

// isPseudo reports whether a pre-release is a pseudo-version's: its last
// two dot- or dash-separated fields a 14-digit UTC time and a 12-hex
// revision (vX.0.0-yyyymmddhhmmss-abcdef123456, vX.Y.Z-pre.0.yyyymmddhhmmss-abcdef123456,
// vX.Y.(Z+1)-0.yyyymmddhhmmss-abcdef123456).
func isPseudo(pre string) bool {
	fields := strings.FieldsFunc(pre, func(r rune) bool { return r == '.' || r == '-' })
	if len(fields) < 2 {
		return false
	}
	ts, hash := fields[len(fields)-2], fields[len(fields)-1]
	return len(ts) == 14 && allDigits([]string{ts}) && len(hash) == 12 && strings.Trim(hash, "0123456789abcdef") == ""
}

func allDigits(parts []string) bool {
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}
