package supervisor

import (
	"strings"
	"unicode/utf8"
)

// MaxStderrPiece is the largest piece of a stderr line, in bytes, that one
// Sink.Stderr call carries.
const MaxStderrPiece = 1 << 20

// SplitLine turns one stderr line (without its newline) into the texts the
// Sink receives. Each maximal run of bytes that are not valid UTF-8 becomes
// one U+FFFD (strings.ToValidUTF8); everything else is kept byte-exact. The
// result is then cut at character boundaries into pieces of at most limit
// bytes, each as long as it can be. An empty line is one empty piece. A limit
// below utf8.UTFMax is taken as utf8.UTFMax, so that every piece holds at
// least one character. The pieces concatenate to the cleaned line.
func SplitLine(line []byte, limit int) []string {
	limit = max(limit, utf8.UTFMax)
	s := strings.ToValidUTF8(string(line), "\uFFFD")
	if len(s) <= limit {
		return []string{s}
	}
	pieces := make([]string, 0, len(s)/limit+1)
	for len(s) > limit {
		cut := limit
		// s is valid UTF-8 and limit >= UTFMax, so a rune start lies in
		// (0, limit]: this loop stops above zero.
		for !utf8.RuneStart(s[cut]) {
			cut--
		}
		pieces = append(pieces, s[:cut])
		s = s[cut:]
	}
	return append(pieces, s)
}
