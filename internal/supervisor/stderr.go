package supervisor

import (
	"strings"
	"unicode/utf8"
)

// MaxStderrPiece bounds one piece of a stderr line, measured as JSON text:
// the piece's length once written as a JSON string (without quotes). A piece
// is therefore also at most MaxStderrPiece bytes, and the event that carries
// it stays small enough to page even when the line is all control bytes:
// under 1 MiB, so that the whole event, seq, type, time and part count
// included, fits the ledger's 1 MiB bound on one event, and a multiple of
// the reader's 4 KiB buffer (stderrRead), so that a section of an endless line
// (maxStderrLine) is a whole number of pieces.
const MaxStderrPiece = 1<<20 - 64<<10

// maxCost is the most one character costs as JSON text (\u00XX).
const maxCost = 6

// jsonCost is how many bytes encoding/json, without HTML escaping (as
// events are stored), writes for r inside a string.
func jsonCost(r rune) int {
	switch {
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t' || r == '\b' || r == '\f':
		return 2
	case r < 0x20 || r == '\u2028' || r == '\u2029':
		// Events are stored without HTML escaping, so <, > and & count
		// one; U+2028 and U+2029 are escaped all the same.
		return maxCost
	default:
		return utf8.RuneLen(r)
	}
}

// SplitLine turns one stderr line (without its newline) into the texts the
// Sink receives. Each maximal run of bytes that are not valid UTF-8 becomes
// one U+FFFD (strings.ToValidUTF8); everything else is kept byte-exact. The
// result is then cut at character boundaries into pieces whose JSON text is
// at most limit bytes, each as long as it can be. An empty line is one empty
// piece. A limit below 6 is taken as 6, so that every piece holds at least
// one character. The pieces concatenate to the cleaned line.
func SplitLine(line []byte, limit int) []string {
	limit = max(limit, maxCost)
	s := strings.ToValidUTF8(string(line), "\uFFFD")
	if len(s)*maxCost <= limit {
		return []string{s}
	}
	var pieces []string
	start, cost := 0, 0
	for i, r := range s {
		c := jsonCost(r)
		if cost+c > limit {
			pieces = append(pieces, s[start:i])
			start, cost = i, 0
		}
		cost += c
	}
	return append(pieces, s[start:])
}
