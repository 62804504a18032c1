package hostsetup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
)

// object is a JSON object with its members in the order the file holds
// them, so that an edit moves nothing the user wrote.
type object []member

type member struct {
	key   string
	value json.RawMessage
}

// parseObject reads a JSON object; empty input (a new file) is an empty
// object. Comments and trailing commas (VS Code's JSONC) are errors.
func parseObject(b []byte) (object, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return object{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var o object
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		o = o.set(key, raw)
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON object")
	}
	return o, nil
}

func (o object) get(key string) (json.RawMessage, bool) {
	for _, m := range o {
		if m.key == key {
			return m.value, true
		}
	}
	return nil, false
}

// set replaces key's value where it stands, or appends it.
func (o object) set(key string, v json.RawMessage) object {
	for i := range o {
		if o[i].key == key {
			o[i].value = v
			return o
		}
	}
	return append(o, member{key, v})
}

// marshal writes the object indented by two spaces, with a final newline.
func (o object) marshal() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(m.key)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.value)
	}
	b.WriteByte('}')
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// entry is a server entry: its members in order, and the ones setup owns.
type entry struct {
	owned object
}

// stdioEntry is the entry of symm-mcp's command: "type": "stdio" first
// where the host's format has it (VS Code, Claude Code).
func stdioEntry(req Request, typed bool) entry {
	args := req.Args
	if args == nil {
		args = []string{}
	}
	var e entry
	if typed {
		e.owned = e.owned.set("type", mustJSON("stdio"))
	}
	e.owned = e.owned.set("command", mustJSON(req.Command))
	e.owned = e.owned.set("args", mustJSON(args))
	return e
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // strings and string slices always encode
	}
	return b
}

// merge sets the owned members over an existing entry, keeping the others
// (an "env" the user added) where they are, and returns it compact (an
// argument of claude mcp add-json); it reports whether anything changed.
func (e entry) merge(old json.RawMessage) (json.RawMessage, bool, error) {
	var cur object
	if old != nil {
		var err error
		if cur, err = parseObject(old); err != nil {
			return nil, false, fmt.Errorf("the entry %q: %w", ServerName, err)
		}
	}
	changed := old == nil
	for _, m := range e.owned {
		v, ok := cur.get(m.key)
		if !ok || !sameJSON(v, m.value) {
			changed = true
		}
		cur = cur.set(m.key, m.value)
	}
	b, err := cur.marshal()
	if err != nil {
		return nil, false, err
	}
	var c bytes.Buffer
	if err := json.Compact(&c, b); err != nil {
		return nil, false, err
	}
	return c.Bytes(), changed, nil
}

// sameJSON compares two JSON values by what they mean.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// serverEntry reads the servers object under key of a configuration and
// the entry of symm-mcp in it (nil when absent).
func serverEntry(doc object, key string) (object, json.RawMessage, error) {
	raw, ok := doc.get(key)
	if !ok || string(raw) == "null" {
		return object{}, nil, nil
	}
	servers, err := parseObject(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("%q: %w", key, err)
	}
	cur, _ := servers.get(ServerName)
	return servers, cur, nil
}

// setupJSON registers the entry in a JSON configuration file under the
// servers key, editing the file in place (Cursor, VS Code).
func setupJSON(env Env, req Request, path, key string, e entry) (Result, error) {
	var res Result
	b, exists, err := readConfig(path)
	if err != nil {
		return res, err
	}
	doc, err := parseObject(b)
	if err != nil {
		return res, &ConfigError{Path: path, Err: fmt.Errorf("not a JSON object setup can edit: %w", err)}
	}
	servers, cur, err := serverEntry(doc, key)
	if err != nil {
		return res, &ConfigError{Path: path, Err: err}
	}
	next, changed, err := e.merge(cur)
	if err != nil {
		return res, &ConfigError{Path: path, Err: err}
	}
	if !changed {
		res.say("%s: already registered in %s: %s (no change)", req.Host, path, commandLine(req))
		return res, nil
	}
	servers = servers.set(ServerName, next)
	sb, err := servers.marshal()
	if err != nil {
		return res, err
	}
	out, err := doc.set(key, bytes.TrimSpace(sb)).marshal()
	if err != nil {
		return res, err
	}
	res.Changed = true
	verb := "registered"
	if req.DryRun {
		verb = "would register"
	}
	res.say("%s: %s %s in %s (%s scope): %s", req.Host, verb, ServerName, path, req.Scope, commandLine(req))
	res.say("  %q: %s", ServerName, next)
	if req.DryRun {
		return res, nil
	}
	if exists {
		bak, err := backup(path, env.Now())
		if err != nil {
			return res, fmt.Errorf("backing up %s: %w", path, err)
		}
		res.say("  backup: %s", bak)
	}
	if err := writeFile(path, out); err != nil {
		return res, fmt.Errorf("writing %s: %w", path, err)
	}
	return res, nil
}

// cursorFile is Cursor's mcp.json: ~/.cursor/mcp.json for the user,
// .cursor/mcp.json in the project.
func cursorFile(env Env, scope Scope) string {
	if scope == ScopeProject {
		return filepath.Join(env.Dir, ".cursor", "mcp.json")
	}
	return filepath.Join(env.Home, ".cursor", "mcp.json")
}

// vscodeFile is VS Code's mcp.json: .vscode/mcp.json in the project, or
// the default profile's, in VS Code's user directory.
func vscodeFile(env Env, scope Scope) (string, error) {
	if scope == ScopeProject {
		return filepath.Join(env.Dir, ".vscode", "mcp.json"), nil
	}
	switch env.GOOS {
	case "darwin":
		return filepath.Join(env.Home, "Library", "Application Support", "Code", "User", "mcp.json"), nil
	case "linux":
		cfg := env.Getenv("XDG_CONFIG_HOME")
		if !filepath.IsAbs(cfg) {
			cfg = filepath.Join(env.Home, ".config")
		}
		return filepath.Join(cfg, "Code", "User", "mcp.json"), nil
	}
	return "", &UsageError{Msg: fmt.Sprintf("VS Code's user profile on %s: use --scope project", env.GOOS)}
}
