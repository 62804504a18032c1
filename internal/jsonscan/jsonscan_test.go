package jsonscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nested is n arrays, one in the other.
func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// seeds are texts at the edges of the grammar, for the fuzz targets' seed
// corpora (run by go test) and the table below.
var seeds = []string{
	`{}`, ` { "a" : 1 , "b":[true,false,null] } `, `[]`, `[1,]`, `{"a":1,}`, `{"a"}`, `{"a":}`, `{,}`,
	`""`, `"\u00e9\ud83d\ude00"`, `"\ud800"`, `"\x"`, `"\u12g4"`, "\"\x01\"", "\"\xff\xfe\"", `"a`,
	`0`, `-0`, `01`, `-`, `1.`, `1.5e`, `1e+9`, `1E-0`, `.5`, `+1`, `-01.5`,
	`true`, `tru`, `nul`, `null `, `falsey`, `1 2`, ``, ` `,
	`{"k":{"k":{"k":[{"x":"\""}]}}}`, `{"a":1}{}`,
	nested(MaxDepth), nested(MaxDepth + 1),
	`"ééééééééé\"ab\u0041éééé\n xxxxxxxx"`, `"éééééééééééééééééé\"ééééééééééééééé"`, `"éxxxxxxxxxxxxxxx\\"`, `"éxxxxxxxxxxxxxxxxxxxxxxx\\"`, "\"éééééééé\x1fxxxxxxxx\"", "\"ééééééééxxxxxxxx\\q\"",
	`{"tool_call_id":"b\u0041","kind":"edit","raw_input":{"s":"\"}"},"locations":[{"path":"/p"}]}`,
}

// scan reports whether s.Value reads all of b, whitespace aside.
func scan(b []byte) bool {
	s := Scanner{Buf: b}
	if !s.Value() {
		return false
	}
	s.Space()
	return s.Pos == len(b)
}

func TestValueAcceptsWhatEncodingJSONAccepts(t *testing.T) {
	for _, in := range seeds {
		assert.Equal(t, json.Valid([]byte(in)), scan([]byte(in)), "%.60q", in)
	}
}

func TestMaxDepthCountsNestedContainers(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want bool
	}{
		{nested(3), 3, true},
		{nested(4), 3, false},
		{`{"a":[{"b":1}]}`, 3, true},
		{`{"a":[{"b":[]}]}`, 3, false},
		{`"no containers"`, 1, true},
		{nested(MaxDepth), 0, true},
		{nested(MaxDepth + 1), 0, false},
	} {
		s := Scanner{Buf: []byte(c.in), MaxDepth: c.max}
		assert.Equal(t, c.want, s.Value() && s.Pos == len(c.in), "%.40s within %d", c.in, c.max)
	}
}

func TestWalk(t *testing.T) {
	names := []string{"type", "text"}
	for _, c := range []struct {
		name, in string
		want     []int // the names' indexes Next stops at
		bad      bool
	}{
		{"picks its names, skips the rest", `{"x":[1,{"y":"}"}],"text":"t","z":null,"type":"a"}`, []int{1, 0}, false},
		{"a name repeated", `{"type":"a","type":"b"}`, []int{0}, true},
		{"a key only a fold matches", `{"Type":"a"}`, nil, true},
		{"a key with an escape", `{"t\u0065xt":"a"}`, nil, true},
		{"a key not ASCII", `{"é":1}`, nil, true},
		{"not an object", `["type"]`, nil, true},
		{"invalid after a name", `{"type":"a",}`, []int{0}, true},
		{"empty", ` { } `, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := Scanner{Buf: []byte(c.in)}
			w := s.Walk(names)
			var got []int
			for w.Next() {
				got = append(got, w.K)
				require.True(t, s.Value())
			}
			assert.Equal(t, c.want, got)
			assert.Equal(t, c.bad, w.Bad)
		})
	}
}

func TestResumeWalkGoesOnWhereAWalkStood(t *testing.T) {
	in := []byte(`{"type":"text","text":"hello","type2":1}`)
	s := Scanner{Buf: in}
	w := s.Walk([]string{"type", "text"})
	require.True(t, w.Next())
	require.True(t, s.Value())
	at, seen := s.Pos, w.Seen

	s = Scanner{Buf: in, Pos: at}
	w = s.ResumeWalk([]string{"type", "text"}, seen)
	require.True(t, w.Next())
	assert.Equal(t, 1, w.K)
	tok, c, ok := s.Str()
	require.True(t, ok)
	assert.Equal(t, "hello", string(Text(tok, c)))
	assert.False(t, w.Next())
	assert.False(t, w.Bad)

	s = Scanner{Buf: in, Pos: 1} // "type" again, which seen holds
	w = s.ResumeWalk([]string{"type", "text"}, seen)
	w.first = true
	assert.False(t, w.Next())
	assert.True(t, w.Bad, "a name the resumed walk had seen is a repeat")
}

func TestStrClassesAndText(t *testing.T) {
	for _, c := range []struct {
		in    string
		class Class
		text  string
		as    bool // encoding/json writes it back byte for byte
	}{
		{`"plain"`, Plain, "plain", true},
		{`"été"`, PlainUTF8, "été", true},
		{"\"\xff\"", PlainUTF8, "\ufffd", false},
		{"\"\u2028\"", PlainUTF8, "\u2028", false},
		{`"a\nb"`, Escaped, "a\nb", false},
		{`"\ud83d\ude00 \ud800"`, Escaped, "😀 \ufffd", false},
	} {
		s := Scanner{Buf: []byte(c.in)}
		tok, class, ok := s.Str()
		require.True(t, ok, c.in)
		assert.Equal(t, c.class, class, c.in)
		assert.Equal(t, c.text, string(Text(tok, class)), c.in)
		assert.Equal(t, c.as, ReencodesAsIs(tok, class), c.in)
	}
}

// FuzzValue holds the scanner to encoding/json: it accepts exactly the
// texts json.Valid accepts, and the members it walks in an object are the
// keys and raw values a json.Decoder reads there.
func FuzzValue(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		valid := json.Valid(b)
		require.Equal(t, valid, scan(b), "the scanner accepts what encoding/json accepts")
		if !valid || bytes.TrimLeft(b, " \t\r\n")[0] != '{' {
			return
		}
		type member struct{ Key, Raw string }
		var want []member
		dec := json.NewDecoder(bytes.NewReader(b))
		_, err := dec.Token()
		require.NoError(t, err)
		for dec.More() {
			k, err := dec.Token()
			require.NoError(t, err)
			var raw json.RawMessage
			require.NoError(t, dec.Decode(&raw))
			want = append(want, member{k.(string), string(raw)})
		}
		var got []member
		s := Scanner{Buf: b}
		m := s.Members()
		for m.Next() {
			raw, ok := s.Raw()
			require.True(t, ok)
			got = append(got, member{string(Text(m.Key, m.KeyClass)), string(raw)})
		}
		require.False(t, m.Bad)
		require.Equal(t, want, got)
	})
}

// FuzzUnquote holds a string token's value (AppendUnquoted, Text) to
// encoding/json's decoding.
func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`"a"`, `"\ud83d\ude00"`, `"\ud800\u0041"`, "\"\xff\"", `"\u00e9\n"`, `"\udc00\ud800\udc00"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, tok []byte) {
		var want string
		if json.Unmarshal(tok, &want) != nil || len(tok) < 2 || tok[0] != '"' {
			return
		}
		s := Scanner{Buf: tok}
		got, c, ok := s.Str()
		require.True(t, ok, "the scanner accepts what encoding/json accepts")
		require.Equal(t, want, string(AppendUnquoted(nil, got[1:len(got)-1])))
		require.Equal(t, want, string(Text(got, c)))
	})
}
