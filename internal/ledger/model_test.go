package ledger

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAppendTime holds the ledger's time writer to the general formatter
// it stands for: random instants over and past the four-digit years, in
// zones other than UTC, and the edges of a millisecond.
func TestAppendTime(t *testing.T) {
	zones := []*time.Location{time.UTC, time.FixedZone("east", 5*3600+1800), time.FixedZone("west", -11*3600)}
	check := func(v time.Time) {
		require.Equal(t, v.UTC().Format(TimeLayout), string(AppendTime(nil, v)), "%v", v)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100_000 {
		sec := rng.Int64N(253402300800+2*86400) - 86400 // from just before year 1 to just past 9999
		v := time.Unix(sec-62135596800, rng.Int64N(1e9)).In(zones[rng.IntN(len(zones))])
		check(v)
	}
	for _, v := range []time.Time{
		{}, time.Date(1970, 1, 1, 0, 0, 0, 999_999, time.UTC), time.Date(2026, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 6, 1, 12, 0, 0, 0, time.UTC),
	} {
		check(v)
	}
	require.Equal(t, "x2026-12-02T17:04:05.123Z", string(AppendTime([]byte("x"), time.Date(2026, 12, 2, 17, 4, 5, 123_456_789, time.UTC))))
}

func BenchmarkAppendTime(b *testing.B) {
	now := time.Now()
	buf := make([]byte, 0, 64)
	for b.Loop() {
		buf = AppendTime(buf[:0], now)
	}
}
