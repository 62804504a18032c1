package webview_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testVersion is the version the rig's daemon runs, as cmd hands it in.
const testVersion = "v1.2.3+0123456789ab"

// The page shows the daemon's version in its header: the session API
// carries it, and both pages have the place the script puts it.
func TestThePageShowsTheVersion(t *testing.T) {
	r := newRig(t, false)
	c, _ := r.login(t)

	resp := r.get(t, "/api/session", c)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var info struct {
		Version string `json:"version"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&info))
	assert.Equal(t, testVersion, info.Version)

	id := r.spawn(t, "a")
	for _, page := range []string{"/", "/tasks/" + id} {
		resp := r.get(t, page, c)
		require.Equal(t, http.StatusOK, resp.StatusCode, page)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Contains(t, string(b), `<span id="version" class="version"></span>`, page)
	}
	resp = r.get(t, "/static/common.js", c)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Contains(t, string(b), "document.getElementById('version').textContent = (await getSession()).version")
}
