package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The baseline (make bench BASELINE=<commit or binary>, -baseline): a
// second build of the server, measured in the same run as today's so that
// the two meet the same load. Three measurements pair the two run by run
// themselves (start, turn, peer: their targets are set against the
// baseline); every other one runs for today's server and then at once for
// the baseline's, in a directory of its own, and each of its rows is
// matched by name with today's. A baseline older than a tool, flag or mode
// a measurement needs cannot run it: its rows say so, and that is not a
// failure of the run.
//
// Adding a row: a measurement that is not paired gets the baseline's
// figure for free, if the row's name does not depend on what was measured
// and its figure reads "<number> <unit>" (ms, s, µs, ns, B, KiB, MiB, GiB,
// ×, or any other unit, compared only with itself). A target against the
// baseline needs a paired measurement: run e.base beside e (nil without a
// baseline) run by run and add the row with table.against.

// step is one measurement of the harness.
type step struct {
	name string
	fn   func(context.Context, *env, *table) error
	// paired measurements measure e.base themselves, run by run.
	paired bool
}

// runStep runs s for today's server and, unless it is paired, for the
// baseline's right after it, setting the baseline's figures into today's
// rows. Only today's error is returned.
func runStep(ctx context.Context, e *env, t *table, s step, logf func(string, ...any)) error {
	from := len(t.rows)
	if err := s.fn(ctx, e, t); err != nil {
		return err
	}
	if e.base == nil || s.paired {
		return nil
	}
	logf("measuring %s for the baseline ...", s.name)
	var tb table
	err := s.fn(ctx, e.base, &tb)
	if err != nil {
		logf("%s: the baseline cannot run it: %v", s.name, err)
	}
	mergeBaseline(t.rows[from:], tb.rows, err)
	return nil
}

// mergeBaseline sets into today's rows the baseline's figure of the row
// of the same name, or why there is none, and today's over it where both
// figures are numbers of one unit.
func mergeBaseline(today, base []row, err error) {
	for i := range today {
		r := &today[i]
		r.base, r.vs = "", ""
		if err != nil {
			r.base = "cannot run: " + firstLine(err.Error(), 60)
			continue
		}
		for _, b := range base {
			if b.name != r.name {
				continue
			}
			r.base = b.value
			if x, ok := figureRatio(r.value, b.value); ok {
				r.vs = ratio(x)
			}
		}
		if r.base == "" {
			r.base = "no such row"
		}
	}
}

// firstLine is s's first line, cut to n runes.
func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// figureRatio is a over b when both read "<number> <unit>..." with the
// same unit (after scaling times and sizes to one unit).
func figureRatio(a, b string) (float64, bool) {
	x, ua, ok1 := parseFigure(a)
	y, ub, ok2 := parseFigure(b)
	if !ok1 || !ok2 || ua != ub || y == 0 {
		return 0, false
	}
	return x / y, true
}

// parseFigure reads a figure's leading number (a leading + and thousands'
// commas allowed) and its unit, scaling times to seconds and sizes to
// bytes.
func parseFigure(s string) (float64, string, bool) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "+")
	end := 0
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' || s[end] == ',' || s[end] == '-') {
		end++
	}
	x, err := strconv.ParseFloat(strings.ReplaceAll(s[:end], ",", ""), 64)
	if end == 0 || err != nil {
		return 0, "", false
	}
	unit, _, _ := strings.Cut(strings.TrimSpace(s[end:]), " ")
	scale := map[string]float64{"s": 1, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
	if f, ok := scale[unit]; ok {
		x *= f
		if strings.HasSuffix(unit, "s") {
			unit = "s"
		} else {
			unit = "B"
		}
	}
	return x, unit, true
}

// newBaseline is the environment of the baseline binary: e's agent,
// workspace and hello, and a directory of its own for what a
// measurement makes there.
func newBaseline(ctx context.Context, e *env, bin string) (*env, error) {
	b := *e
	b.base = nil
	b.dir = filepath.Join(e.dir, "baseline")
	var err error
	if b.server, err = filepath.Abs(bin); err != nil {
		return nil, err
	}
	if _, err := os.Stat(b.server); err != nil {
		return nil, fmt.Errorf("the baseline: %w (make bench builds BASELINE)", err)
	}
	for _, d := range []string{b.dir, filepath.Join(b.dir, "notify")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
	}
	if b.maxBytes, err = b.takesMaxBytes(ctx); err != nil {
		return nil, fmt.Errorf("the baseline: %w", err)
	}
	return &b, nil
}

func TestParseFigure(t *testing.T) {
	for _, c := range []struct {
		a, b string
		x    float64
		ok   bool
	}{
		{"2.00 ms", "1.00 ms", 2, true},
		{"1.50 s", "750.0 ms", 2, true},
		{"3.40 µs", "1.70 µs", 2, true},
		{"30.6 MiB", "15.3 MiB", 2, true},
		{"4.70× of hello", "3.10× of hello", 4.7 / 3.1, true},
		{"856,000/s", "428,000/s", 2, true},
		{"+1.50 ms over the binary", "+0.75 ms over the binary", 2, true},
		{"12 MiB", "12 ms", 0, false},
		{"error", "1 ms", 0, false},
		{"1 ms", "0 ms", 0, false},
	} {
		x, ok := figureRatio(c.a, c.b)
		assert.Equal(t, c.ok, ok, "%q / %q", c.a, c.b)
		assert.InDelta(t, c.x, x, 1e-9, "%q / %q", c.a, c.b)
	}
}

// TestMergeBaseline: rows are matched by name; a row the baseline has not
// says so, and a measurement it cannot run says why on each row.
func TestMergeBaseline(t *testing.T) {
	today := []row{{name: "a", value: "2.0 ms"}, {name: "b", value: "3 MiB"}, {name: "c", value: "x"}}
	mergeBaseline(today, []row{{name: "a", value: "1.0 ms"}, {name: "c", value: "y"}}, nil)
	assert.Equal(t, "1.0 ms", today[0].base)
	assert.Equal(t, "2.00×", today[0].vs)
	assert.Equal(t, "no such row", today[1].base)
	assert.Equal(t, "y", today[2].base)
	assert.Empty(t, today[2].vs)

	mergeBaseline(today[:1], nil, fmt.Errorf("spawn_tasks: unknown tool\nmore"))
	assert.Equal(t, "cannot run: spawn_tasks: unknown tool", today[0].base)
}

// TestRunStep: an unpaired measurement runs for the baseline too and its
// rows get the baseline's figures; one the baseline cannot run says so on
// each row, and the run goes on; a paired one is run once, and today's
// error is the step's.
func TestRunStep(t *testing.T) {
	today := &env{}
	today.base = &env{}
	logf := func(string, ...any) {}
	fn := func(_ context.Context, e *env, tb *table) error {
		if e == today {
			tb.info("figure", "2.0 ms", "")
			return nil
		}
		tb.info("figure", "1.0 ms", "")
		return nil
	}
	var tb table
	assert.NoError(t, runStep(t.Context(), today, &tb, step{name: "x", fn: fn}, logf))
	if assert.Len(t, tb.rows, 1) {
		assert.Equal(t, "1.0 ms", tb.rows[0].base)
		assert.Equal(t, "2.00×", tb.rows[0].vs)
	}

	old := func(_ context.Context, e *env, tb *table) error {
		if e == today {
			tb.info("figure", "2.0 ms", "")
			return nil
		}
		return fmt.Errorf("spawn_tasks: unknown tool")
	}
	tb = table{}
	assert.NoError(t, runStep(t.Context(), today, &tb, step{name: "x", fn: old}, logf))
	if assert.Len(t, tb.rows, 1) {
		assert.Equal(t, "cannot run: spawn_tasks: unknown tool", tb.rows[0].base)
	}

	calls := 0
	paired := func(context.Context, *env, *table) error { calls++; return fmt.Errorf("broken") }
	assert.EqualError(t, runStep(t.Context(), today, &tb, step{name: "x", fn: paired, paired: true}, logf), "broken")
	assert.Equal(t, 1, calls)
}
