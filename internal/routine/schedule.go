package routine

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Bounds of a schedule (intent 0054).
const (
	// MinEvery is the shortest interval of "every": a routine is an agent
	// job, which takes minutes, and a scheduler reading its routines every
	// minute cannot promise a shorter one.
	MinEvery = time.Minute
	// MaxEvery is the longest interval of "every" (31 days); a longer
	// period is a daily routine's job.
	MaxEvery = 31 * 24 * time.Hour
	// maxScheduleBytes bounds the schedule's text.
	maxScheduleBytes = 100
	// maxZoneBytes bounds an IANA zone's name (the longest is 32).
	maxZoneBytes = 64
)

// schedule says when a routine's occurrences fall. An occurrence is a
// time truncated to the second: the occurrence, not the moment it is
// noticed, names a run (its idempotency key).
type schedule struct {
	kind  string        // "manual", "every" or "daily"
	every time.Duration // kind "every"
	hour  int           // kind "daily"
	min   int
	zone  *time.Location
}

// parseSchedule reads "manual", "every <duration>" (a Go duration from
// MinEvery to MaxEvery, whole seconds) or "daily HH:MM <IANA zone>".
// The text is hostile: anything else is refused, with why.
func parseSchedule(text string) (schedule, error) {
	if len(text) > maxScheduleBytes {
		return schedule{}, fmt.Errorf("schedule has %d bytes, more than %d", len(text), maxScheduleBytes)
	}
	f := strings.Split(text, " ")
	switch {
	case len(f) == 1 && f[0] == "manual":
		return schedule{kind: "manual"}, nil
	case len(f) == 2 && f[0] == "every":
		d, err := time.ParseDuration(f[1])
		if err != nil {
			return schedule{}, fmt.Errorf("schedule %q: %q is not a duration such as 15m or 2h", text, f[1])
		}
		if d < MinEvery || d > MaxEvery {
			return schedule{}, fmt.Errorf("schedule %q: the interval must be from %v to %v", text, MinEvery, MaxEvery)
		}
		if d%time.Second != 0 {
			return schedule{}, fmt.Errorf("schedule %q: the interval must be whole seconds", text)
		}
		return schedule{kind: "every", every: d}, nil
	case len(f) == 3 && f[0] == "daily":
		h, m, ok := parseClock(f[1])
		if !ok {
			return schedule{}, fmt.Errorf("schedule %q: %q is not a time of day HH:MM (00:00 to 23:59)", text, f[1])
		}
		loc, err := loadZone(f[2])
		if err != nil {
			return schedule{}, fmt.Errorf("schedule %q: %w", text, err)
		}
		return schedule{kind: "daily", hour: h, min: m, zone: loc}, nil
	}
	return schedule{}, fmt.Errorf("schedule %q is none of: manual, every <duration>, daily HH:MM <IANA zone> (words separated by one space)", text)
}

// parseClock reads HH:MM, exactly two digits each.
func parseClock(s string) (h, m int, ok bool) {
	if len(s) != 5 || s[2] != ':' {
		return 0, 0, false
	}
	for _, i := range []int{0, 1, 3, 4} {
		if s[i] < '0' || s[i] > '9' {
			return 0, 0, false
		}
	}
	h, _ = strconv.Atoi(s[:2])
	m, _ = strconv.Atoi(s[3:])
	return h, m, h < 24 && m < 60
}

// loadZone loads an IANA zone by name. "Local" and "" (the machine's own
// zone, which differs between a cluster's daemons) are refused, as is any
// name not made of the characters zone names use.
func loadZone(name string) (*time.Location, error) {
	if name == "" || name == "Local" || len(name) > maxZoneBytes {
		return nil, fmt.Errorf("%q is not an IANA zone name such as Europe/Paris or UTC", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '/' || c == '_' || c == '-' || c == '+') {
			return nil, fmt.Errorf("%q is not an IANA zone name such as Europe/Paris or UTC", name)
		}
	}
	if name[0] == '/' || strings.Contains(name, "//") {
		return nil, fmt.Errorf("%q is not an IANA zone name such as Europe/Paris or UTC", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("no IANA zone named %q in this machine's zone database", name)
	}
	return loc, nil
}

// latest is the schedule's last occurrence at or before t, after anchor
// (zero: none). An "every" schedule's occurrences are anchor + k·every,
// k ≥ 1.
func (s schedule) latest(t, anchor time.Time) time.Time {
	switch s.kind {
	case "every":
		if t.Before(anchor.Add(s.every)) {
			return time.Time{}
		}
		k := t.Sub(anchor) / s.every
		return anchor.Add(k * s.every)
	case "daily":
		lt := t.In(s.zone)
		// A day's occurrence may fall on the next day's clock (a time in
		// a DST gap moves forward): step back until one is at or before t.
		for d := 0; d >= -3; d-- {
			if o := s.on(lt, d); !o.After(t) {
				if !o.After(anchor) {
					return time.Time{}
				}
				return o
			}
		}
	}
	return time.Time{}
}

// next is the schedule's first occurrence after t (zero: none, manual).
func (s schedule) next(t, anchor time.Time) time.Time {
	switch s.kind {
	case "every":
		if t.Before(anchor) {
			return anchor.Add(s.every)
		}
		k := t.Sub(anchor)/s.every + 1
		return anchor.Add(k * s.every)
	case "daily":
		lt := t.In(s.zone)
		for d := 0; d <= 3; d++ {
			if o := s.on(lt, d); o.After(t) {
				return o
			}
		}
	}
	return time.Time{}
}

// on is the occurrence on the day d days from lt's date, in the zone. A
// clock time the day skips (a DST gap) falls at the gap's end, the first
// minute the day's clock reaches it (02:30 on New York's spring-forward
// night is 03:00 EDT); a time the day has twice (fall back) is the first.
func (s schedule) on(lt time.Time, d int) time.Time {
	y, m, day := lt.Date()
	ty, tm, td := time.Date(y, m, day+d, 0, 0, 0, 0, time.UTC).Date()
	o := time.Date(ty, tm, td, s.hour, s.min, 0, 0, s.zone)
	want := s.hour*60 + s.min
	// time.Date leaves a gap's choice open: walk to the gap's end.
	for range 24 * 60 {
		l := o.In(s.zone)
		if ly, lm, ld := l.Date(); ly != ty || lm != tm || ld != td || l.Hour()*60+l.Minute() >= want {
			return o.UTC()
		}
		o = o.Add(time.Minute)
	}
	return o.UTC()
}
