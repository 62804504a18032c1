package routine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustSchedule(t *testing.T, text string) schedule {
	t.Helper()
	s, err := parseSchedule(text)
	require.NoError(t, err, text)
	return s
}

func TestEveryIsAnchoredAtItsStart(t *testing.T) {
	s := mustSchedule(t, "every 15m")
	a := time.Date(2026, 12, 1, 10, 7, 0, 0, time.UTC)
	assert.Equal(t, a.Add(15*time.Minute), s.next(a, a))
	assert.Equal(t, a.Add(30*time.Minute), s.next(a.Add(15*time.Minute), a), "next is strictly after")
	assert.True(t, s.latest(a.Add(14*time.Minute), a).IsZero(), "nothing before the first interval ends")
	assert.Equal(t, a.Add(45*time.Minute), s.latest(a.Add(59*time.Minute), a))
}

func TestDailyAcrossDaylightSavingTime(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	s := mustSchedule(t, "daily 02:30 America/New_York")
	// 2026-03-08: clocks go from 02:00 EST to 03:00 EDT; 02:30 does not
	// exist and the day's run is at 03:00 EDT (07:00 UTC: the gap's end), once.
	before := time.Date(2026, 3, 7, 12, 0, 0, 0, ny)
	gap := s.next(before, time.Time{})
	assert.Equal(t, time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC), gap.UTC())
	assert.Equal(t, time.Date(2026, 3, 9, 6, 30, 0, 0, time.UTC), s.next(gap, time.Time{}).UTC(), "the next day at 02:30 EDT")
	assert.Equal(t, time.Date(2026, 3, 7, 7, 30, 0, 0, time.UTC), s.next(before.Add(-12*time.Hour), time.Time{}).UTC(), "02:30 EST the day before")

	// 2026-11-01: 01:30 happens twice (EDT, then EST): the run is the first.
	fb := mustSchedule(t, "daily 01:30 America/New_York")
	first := fb.next(time.Date(2026, 10, 31, 12, 0, 0, 0, ny), time.Time{})
	assert.Equal(t, time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), first.UTC())
	second := fb.next(first, time.Time{})
	assert.Equal(t, time.Date(2026, 11, 2, 6, 30, 0, 0, time.UTC), second.UTC(), "not again an hour later")
	assert.Equal(t, first, fb.latest(first.Add(time.Hour), time.Time{}))
}

func TestSchedulesRefused(t *testing.T) {
	for _, text := range []string{
		"", "Manual", "manual ", "every", "every 59s", "every 1500ms", "every 745h", "every -5m", "every 5", "every  5m",
		"daily 9:00 UTC", "daily 24:00 UTC", "daily 12:60 UTC", "daily 12:00", "daily 12:00 Local", "daily 12:00 Mars/Olympus",
		"daily 12:00 ../../etc/passwd", "daily 12:00 /etc/localtime", "daily 12:00 Europe//Paris", "daily １２:00 UTC",
		"daily 12:00 UTC extra", "hourly", "every 5m\n", string(make([]byte, 200)),
	} {
		_, err := parseSchedule(text)
		assert.Error(t, err, "%q", text)
	}
	for _, text := range []string{"manual", "every 1m", "every 744h", "every 90s", "daily 00:00 UTC", "daily 23:59 Europe/Paris", "daily 07:05 Etc/GMT+5"} {
		_, err := parseSchedule(text)
		assert.NoError(t, err, "%q", text)
	}
}
