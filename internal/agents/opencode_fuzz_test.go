package agents

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzOpencodeConfig: whatever the user's value, the merge either fails
// naming the variable or yields an object in which our three entries ask and
// every other key of the user's object is kept.
func FuzzOpencodeConfig(f *testing.F) {
	for _, s := range []string{"", " \n\t", "{}", `{"model":"x"}`, `{"permission":"allow"}`,
		`{"permission":{"edit":"allow","read":"allow"}}`, `[]`, `null`, `"x"`, `{"a":1} trailing`, "\f{}", `{"permission":null}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, user string) {
		out, err := OpencodeConfig(user)
		if err != nil {
			if !strings.Contains(err.Error(), OpencodeConfigVar) {
				t.Fatalf("error does not name %s: %v", OpencodeConfigVar, err)
			}
			return
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("merged value is not a JSON object: %v: %s", err, out)
		}
		perm, ok := got["permission"].(map[string]any)
		if !ok {
			t.Fatalf("permission is not an object: %s", out)
		}
		for _, k := range opencodeAsk {
			if perm[k] != "ask" {
				t.Fatalf("permission.%s = %v, want ask", k, perm[k])
			}
		}
		var in map[string]any
		if json.Unmarshal([]byte(user), &in) == nil {
			for k, v := range in {
				if k != "permission" && !reflect.DeepEqual(got[k], v) {
					t.Fatalf("key %q changed: %v -> %v", k, v, got[k])
				}
			}
		}
	})
}
