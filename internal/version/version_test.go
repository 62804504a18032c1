package version

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

func build(main string, settings ...string) *debug.BuildInfo {
	bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/symm-mcp/symm-mcp", Version: main}}
	for i := 0; i+1 < len(settings); i += 2 {
		bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
	}
	return bi
}

const rev = "0123456789abcdef0123456789abcdef01234567"

func TestResolve(t *testing.T) {
	for _, c := range []struct {
		name              string
		linkVersion, link string
		bi                *debug.BuildInfo
		want              string
		wantInfo          Info
	}{
		{name: "release build", linkVersion: "v1.2.3", link: rev, bi: build("(devel)"),
			want: "v1.2.3+0123456789ab", wantInfo: Info{Version: "v1.2.3", Commit: rev}},
		{name: "release build, commit from the toolchain", linkVersion: "v1.2.3", bi: build("v1.2.3", "vcs.revision", rev, "vcs.modified", "false"),
			want: "v1.2.3+0123456789ab"},
		{name: "go install @v1.2.3", bi: build("v1.2.3"), want: "v1.2.3"},
		{name: "go install @v1.3.0-rc.1", bi: build("v1.3.0-rc.1"), want: "v1.3.0-rc.1"},
		{name: "go install @commit", bi: build("v0.0.0-20261205142000-0123456789ab"), want: "v0.0.0-20261205142000-0123456789ab"},
		{name: "checkout, pseudo-version", bi: build("v0.0.0-20261205142000-0123456789ab", "vcs.revision", rev, "vcs.modified", "false"),
			want: "v0.0.0-dev+0123456789ab"},
		{name: "checkout after a tag", bi: build("v1.2.4-0.20261205142000-0123456789ab", "vcs.revision", rev),
			want: "v0.0.0-dev+0123456789ab"},
		{name: "checkout, modified", bi: build("v0.0.0-20261205142000-0123456789ab+dirty", "vcs.revision", rev, "vcs.modified", "true"),
			want: "v0.0.0-dev+0123456789ab-dirty"},
		{name: "checkout on a clean tag", bi: build("v1.2.3", "vcs.revision", rev, "vcs.modified", "false"),
			want: "v1.2.3+0123456789ab"},
		{name: "checkout, -buildvcs=false", bi: build("(devel)"), want: Dev},
		{name: "no build information", want: Dev},
		{name: "release version with metadata", linkVersion: "v1.2.3+meta", link: rev, want: "v1.2.3+meta.0123456789ab"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := resolve(c.linkVersion, c.link, c.bi)
			assert.Equal(t, c.want, got.String())
			assert.NotContains(t, got.String(), "(devel)")
			if c.wantInfo != (Info{}) {
				assert.Equal(t, c.wantInfo, got)
			}
		})
	}
}

// A test binary is a build in a checkout or without VCS information:
// never "(devel)".
func TestString(t *testing.T) {
	assert.NotContains(t, String(), "(devel)")
	assert.Regexp(t, `^v\d+\.\d+\.\d+`, String())
}
