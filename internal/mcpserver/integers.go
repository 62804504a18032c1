package mcpserver

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// wholeNumber is an integer argument whose upper end the handler decides
// (a page size clamps, a cursor past the end gives an empty page, a
// timeout out of its range is invalid_request), so its schema has no
// maximum. It takes any whole JSON number and saturates at the int64
// range. That is needed because the SDK validates arguments as float64
// and hands them on re-encoded from there: the largest int64,
// 9223372036854775807, arrives as 9223372036854775808, and 1e30 as 1e+30,
// which no Go integer decodes. A schema maximum below 2^63 would quote a
// bound the handler never had (issue 30).
type wholeNumber int64

// UnmarshalJSON reads an integer exactly when it fits an int64, else any
// whole number (the schema has already refused fractions), saturated.
func (n *wholeNumber) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		*n = wholeNumber(i)
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	// A range error's ±Inf still saturates.
	if err != nil && !errors.Is(err, strconv.ErrRange) || f != math.Trunc(f) {
		return fmt.Errorf("%.40s is not a whole number", s)
	}
	switch {
	case f >= math.MaxInt64: // float64(MaxInt64) is 2^63
		*n = math.MaxInt64
	case f <= math.MinInt64:
		*n = math.MinInt64
	default:
		*n = wholeNumber(f)
	}
	return nil
}

// int is n as an int, saturated where int is narrower than int64.
func (n wholeNumber) int() int {
	return int(max(min(int64(n), math.MaxInt), math.MinInt))
}

// intPtr is n as the service's optional int.
func (n *wholeNumber) intPtr() *int {
	if n == nil {
		return nil
	}
	i := n.int()
	return &i
}
