package agents

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzOpencodeConfig: whatever the user's values, the merge either fails
// naming a variable, or yields an object whose top-level permission and
// build agent's permission end with our three entries, set to ask, and in
// which every other top-level key of the user's object is kept.
func FuzzOpencodeConfig(f *testing.F) {
	for _, s := range []string{"", " \n\t", "{}", `{"model":"x"}`, `{"permission":"allow"}`,
		`{"permission":{"edit":"allow","read":"allow"}}`, `[]`, `null`, `"x"`, `{"a":1} trailing`, "\f{}", `{"permission":null}`,
		`{"agent":{"build":{"permission":{"*":"allow","edit":"allow"}}},"mode":{"build":{}}}`, `{"permission":{"a":1,"a":2}}`} {
		f.Add(s, "")
		f.Add(s, `{"*":"allow"}`)
	}
	f.Fuzz(func(t *testing.T, user, userPermission string) {
		out, err := OpencodeConfig(user, userPermission)
		if err != nil {
			if !strings.Contains(err.Error(), OpencodeConfigVar) && !strings.Contains(err.Error(), OpencodePermissionVar) {
				t.Fatalf("error names neither variable: %v", err)
			}
			return
		}
		cfg, err := decodeObject(json.RawMessage(out), "out", "")
		if err != nil {
			t.Fatalf("merged value is not a JSON object: %v: %s", err, out)
		}
		endsWithOurs := func(where string, raw json.RawMessage) {
			perm, err := decodeObject(raw, "out", where)
			if err != nil || len(perm) < len(opencodeAsk) {
				t.Fatalf("%s is not an object ending with ours: %s", where, out)
			}
			tail := perm[len(perm)-len(opencodeAsk):]
			for i, k := range opencodeAsk {
				if tail[i].key != k || string(tail[i].value) != `"ask"` {
					t.Fatalf("%s does not end with %s: ask: %s", where, k, out)
				}
			}
			for _, m := range perm[:len(perm)-len(opencodeAsk)] {
				if isOpencodeAsk(m.key) {
					t.Fatalf("%s holds %s twice: %s", where, m.key, out)
				}
			}
		}
		endsWithOurs("permission", cfg.get("permission"))
		sections := []string{"agent"}
		if isObject(json.RawMessage(user)) && strings.Contains(user, `"mode"`) {
			var in map[string]json.RawMessage
			if json.Unmarshal([]byte(user), &in) == nil && in["mode"] != nil && string(in["mode"]) != "null" {
				sections = append(sections, "mode")
			}
		}
		for _, section := range sections {
			agents, err := decodeObject(cfg.get(section), "out", section)
			if err != nil {
				t.Fatalf("%s is not an object: %s", section, out)
			}
			build, err := decodeObject(agents.get("build"), "out", section+".build")
			if err != nil {
				t.Fatalf("%s.build is not an object: %s", section, out)
			}
			endsWithOurs(section+".build.permission", build.get("permission"))
		}
		var in, got map[string]any
		if json.Unmarshal([]byte(user), &in) == nil && json.Unmarshal([]byte(out), &got) == nil {
			for k, v := range in {
				if k != "permission" && k != "agent" && k != "mode" && !reflect.DeepEqual(got[k], v) {
					t.Fatalf("key %q changed: %v -> %v", k, v, got[k])
				}
			}
		}
	})
}
