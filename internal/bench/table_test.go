package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one line of the table: a figure, what it is set beside, and the
// target it is held to (pass is nil for figures without a target). With a
// baseline (-baseline), base is the baseline binary's figure for the same
// row (or why it has none) and vs today's figure over it.
type row struct {
	name   string
	value  string
	detail string
	target string
	pass   *bool
	base   string
	vs     string
}

// table is the harness's output; baseline says whether the run set a
// baseline binary beside the server (the baseline columns are printed).
type table struct {
	rows     []row
	baseline bool
}

func (t *table) add(r row) { t.rows = append(t.rows, r) }

// check adds a row whose target holds when ok.
func (t *table) check(name, value, detail, target string, ok bool) {
	t.add(row{name: name, value: value, detail: detail, target: target, pass: &ok})
}

// info adds a row without a target.
func (t *table) info(name, value, detail string) {
	t.add(row{name: name, value: value, detail: detail})
}

func (t *table) failed() bool {
	for _, r := range t.rows {
		if r.pass != nil && !*r.pass {
			return true
		}
	}
	return false
}

// against adds a row whose figure is set beside the baseline's, measured
// in the same run: today and base are the two figures, x today's over the
// baseline's, and the target (on x) holds when ok.
func (t *table) against(name, today, base string, x float64, detail, target string, ok bool) {
	t.add(row{name: name, value: today, base: base, vs: ratio(x), detail: detail, target: target, pass: &ok})
}

// print writes the table as Markdown, aligned for a terminal too; with a
// baseline, its figure and today's over it follow the measure's name.
func (t *table) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	line := func(cells ...string) {
		fmt.Fprintf(tw, "| %s\t |\n", strings.Join(cells, "\t | "))
	}
	if t.baseline {
		line("measure", "baseline", "today", "today / baseline", "beside it", "target", "result")
		line("---", "---", "---", "---", "---", "---", "---")
	} else {
		line("measure", "median", "beside it", "target", "result")
		line("---", "---", "---", "---", "---")
	}
	for _, r := range t.rows {
		result := ""
		switch {
		case r.pass == nil:
			result = "info"
		case *r.pass:
			result = "pass"
		default:
			result = "FAIL"
		}
		if t.baseline {
			line(r.name, cell(r.base), r.value, cell(r.vs), r.detail, r.target, result)
		} else {
			line(r.name, r.value, r.detail, r.target, result)
		}
	}
	_ = tw.Flush()
}

func ptr[T any](v T) *T { return &v }

// cell is a table cell that may be empty.
func cell(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// median of xs (which it sorts); 0 for none.
func median[T int64 | float64 | time.Duration](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// percentile of xs (which it sorts), nearest rank.
func percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	k := int(p/100*float64(len(xs))+0.999999) - 1
	return xs[min(max(k, 0), len(xs)-1)]
}

func ms(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
}

func us(d time.Duration) string { return fmt.Sprintf("%.2f µs", float64(d)/1e3) }

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func ratio(x float64) string { return fmt.Sprintf("%.2f×", x) }
