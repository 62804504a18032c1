package agents

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// opencodeAsk are the permission entries symm-mcp pins to "ask".
var opencodeAsk = []string{"edit", "bash", "webfetch"}

// opencode turns a permission object into rules in the order of its keys,
// and the last rule that matches a tool call wins; keys may be wildcards
// ("*", "edit*"). When it merges configurations, a key keeps the place it
// had in the first one that set it. And the build agent's own rules come
// after the top-level ones. So symm-mcp writes its entries last in every
// permission object it writes, folds OPENCODE_PERMISSION into the inline
// configuration ahead of them, and always gives the build agent its own
// rules (intent 0006).

// OpencodeEnv returns the opencode adapter's environment: its inline
// configuration with symm-mcp's permission rules (OpencodeConfig) and, when
// the server's environment sets OPENCODE_PERMISSION, that variable holding
// only symm-mcp's rules: its entries moved into the inline configuration.
// opencode merges OPENCODE_PERMISSION over every configuration it loaded,
// and appends its new keys, so the user's value would otherwise come last.
func OpencodeEnv(getenv func(string) string) ([]string, error) {
	user := getenv(OpencodePermissionVar)
	cfg, err := OpencodeConfig(getenv(OpencodeConfigVar), user)
	if err != nil {
		return nil, err
	}
	env := []string{OpencodeConfigVar + "=" + cfg}
	if !isBlank(user) {
		env = append(env, OpencodePermissionVar+"="+string(withAsk(nil).encode()))
	}
	return env, nil
}

// OpencodeConfig merges symm-mcp's permission rules into the user's inline
// opencode configuration (OPENCODE_CONFIG_CONTENT) and permission object
// (OPENCODE_PERMISSION, merged over the inline one as opencode would):
// every other key is kept in its order; edit, bash and webfetch are set to
// "ask" as the last entries of the top-level permission and of the build
// agent's (agent.build, always; mode.build, its older name, where the user
// has it). A permission given as a string ("allow") is the object {"*": it}.
// A blank value counts as unset; a value that is not a JSON object is an
// error naming its variable.
func OpencodeConfig(user, userPermission string) (string, error) {
	cfg, err := variableObject(OpencodeConfigVar, user)
	if err != nil {
		return "", err
	}
	perm, err := permissionObject(OpencodeConfigVar, "permission", cfg.get("permission"))
	if err != nil {
		return "", err
	}
	over, err := variableObject(OpencodePermissionVar, userPermission)
	if err != nil {
		return "", err
	}
	for _, m := range over {
		perm.set(m.key, m.value)
	}
	cfg.set("permission", withAsk(perm).encode())
	if err := pinBuild(&cfg, "agent", true); err != nil {
		return "", err
	}
	if err := pinBuild(&cfg, "mode", false); err != nil {
		return "", err
	}
	return string(cfg.encode()), nil
}

// pinBuild gives cfg[section].build.permission symm-mcp's entries, creating
// the section and the build entry when always is set.
func pinBuild(cfg *object, section string, always bool) error {
	raw := cfg.get(section)
	if raw == nil && !always {
		return nil
	}
	agents, err := objectOf(raw, OpencodeConfigVar, section)
	if err != nil {
		return err
	}
	where := section + ".build"
	build, err := objectOf(agents.get("build"), OpencodeConfigVar, where)
	if err != nil {
		return err
	}
	perm, err := permissionObject(OpencodeConfigVar, where+".permission", build.get("permission"))
	if err != nil {
		return err
	}
	build.set("permission", withAsk(perm).encode())
	agents.set("build", build.encode())
	cfg.set(section, agents.encode())
	return nil
}

// withAsk moves symm-mcp's entries, set to "ask", to the end of perm.
func withAsk(perm object) object {
	out := make(object, 0, len(perm)+len(opencodeAsk))
	for _, m := range perm {
		if !isOpencodeAsk(m.key) {
			out = append(out, m)
		}
	}
	for _, k := range opencodeAsk {
		out = append(out, member{k, json.RawMessage(`"ask"`)})
	}
	return out
}

func isOpencodeAsk(key string) bool { return slices.Contains(opencodeAsk, key) }

// permissionObject reads a permission value: an object as it is, a string
// as {"*": string}, nothing (or null) as an empty object.
func permissionObject(variable, where string, raw json.RawMessage) (object, error) {
	v := bytes.TrimLeft(raw, jsonWhitespace)
	switch {
	case len(v) > 0 && v[0] == '"':
		return object{{"*", raw}}, nil
	case len(v) > 0 && v[0] == '{':
		return decodeObject(raw, variable, where)
	case len(v) == 0 || string(bytes.TrimRight(v, jsonWhitespace)) == "null":
		return nil, nil
	}
	return nil, fmt.Errorf("%s: %s must be an object or a string", variable, where)
}

// objectOf reads a value that must be an object when present.
func objectOf(raw json.RawMessage, variable, where string) (object, error) {
	v := bytes.TrimLeft(raw, jsonWhitespace)
	switch {
	case len(v) == 0 || string(bytes.TrimRight(v, jsonWhitespace)) == "null":
		return nil, nil
	case v[0] == '{':
		return decodeObject(raw, variable, where)
	}
	return nil, fmt.Errorf("%s: %s must be an object", variable, where)
}

// variableObject reads an environment variable that must hold a JSON
// object; blank is an empty object.
func variableObject(variable, value string) (object, error) {
	if isBlank(value) {
		return nil, nil
	}
	if err := json.Unmarshal([]byte(value), new(json.RawMessage)); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON (it must hold a JSON object): %w", variable, err)
	}
	if !isObject(json.RawMessage(value)) {
		return nil, fmt.Errorf("%s must hold a JSON object", variable)
	}
	return decodeObject(json.RawMessage(value), variable, "")
}

// jsonWhitespace is what JSON counts as whitespace (RFC 8259): a value of
// only these counts as unset. Other Unicode spaces make it invalid JSON.
const jsonWhitespace = " \t\n\r"

func isBlank(s string) bool { return strings.Trim(s, jsonWhitespace) == "" }

func isObject(raw json.RawMessage) bool {
	b := bytes.TrimLeft(raw, jsonWhitespace)
	return len(b) > 0 && b[0] == '{'
}

// An object is a JSON object's members in the order they were written; the
// values stay as written.
type object []member

type member struct {
	key   string
	value json.RawMessage
}

// decodeObject reads a valid JSON object. A repeated key keeps its first
// place and its last value, as JavaScript's JSON.parse does.
func decodeObject(raw json.RawMessage, variable, where string) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	fail := func(err error) (object, error) {
		if where == "" {
			return nil, fmt.Errorf("%s: %w", variable, err)
		}
		return nil, fmt.Errorf("%s: %s: %w", variable, where, err)
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return fail(errors.New("not an object"))
	}
	var o object
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return fail(err)
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return fail(err)
		}
		o.set(key, v)
	}
	if _, err := dec.Token(); err != nil {
		return fail(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fail(errors.New("data after the object"))
	}
	return o, nil
}

func (o object) get(key string) json.RawMessage {
	for _, m := range o {
		if m.key == key {
			return m.value
		}
	}
	return nil
}

// set replaces key's value in place, or adds key at the end.
func (o *object) set(key string, value json.RawMessage) {
	for i, m := range *o {
		if m.key == key {
			(*o)[i].value = value
			return
		}
	}
	*o = append(*o, member{key, value})
}

// encode writes the object with its members in order; keys are escaped
// without HTML escaping, so the user's text reaches opencode as written.
func (o object) encode() json.RawMessage {
	b := []byte{'{'}
	for i, m := range o {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, m.key)
		b = append(b, ':')
		b = append(b, m.value...)
	}
	return append(b, '}')
}

func appendJSONString(b []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}
