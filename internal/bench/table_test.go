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
// target it is held to (pass is nil for figures without a target).
type row struct {
	name   string
	value  string
	detail string
	target string
	pass   *bool
}

type table struct{ rows []row }

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

// print writes the table as Markdown, aligned for a terminal too.
func (t *table) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	line := func(cells ...string) {
		fmt.Fprintf(tw, "| %s\t |\n", strings.Join(cells, "\t | "))
	}
	line("measure", "median", "beside it", "target", "result")
	line("---", "---", "---", "---", "---")
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
		line(r.name, r.value, r.detail, r.target, result)
	}
	_ = tw.Flush()
}

func ptr[T any](v T) *T { return &v }

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
