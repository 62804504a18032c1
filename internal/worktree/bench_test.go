package worktree

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkCreate makes a worktree of a repository of 10,000 small files
// (100 directories of 100), changes one file and diffs it: what a task with
// isolation=worktree costs before its agent starts and after it ends. The
// removal that follows each round is reported apart (remove-ms) and not in
// ns/op, and so is a plain copy of the same 10,000 files (copy-ms, with
// os.CopyFS): writing the files is most of what creation costs, and the
// machine's file system sets that price, so create/copy, measured in the
// same rounds, is the figure that holds from one machine (and one load) to
// the next.
func BenchmarkCreate(b *testing.B) {
	files := map[string]string{}
	for d := range 100 {
		for f := range 100 {
			files[fmt.Sprintf("dir%03d/file%03d.txt", d, f)] = fmt.Sprintf("file %d of directory %d\n", f, d)
		}
	}
	r := newRig(b, files)
	plain := b.TempDir()
	r.write(plain, files)
	copies := b.TempDir()
	ctx := context.Background()
	var create, diff, remove, copying time.Duration
	n := 0
	for b.Loop() {
		t0 := time.Now()
		wt, err := r.m.Create(ctx, r.request(fmt.Sprintf("bench%d", n)))
		require.NoError(b, err)
		t1 := time.Now()
		r.write(wt.Path, map[string]string{"dir050/file050.txt": "changed\n"})
		t2 := time.Now()
		d, err := r.m.Diff(ctx, wt)
		require.NoError(b, err)
		require.Len(b, d.Files, 1)
		t3 := time.Now()
		b.StopTimer()
		reason, err := r.m.Remove(ctx, wt, true)
		require.NoError(b, err)
		require.Empty(b, reason)
		t4 := time.Now()
		require.NoError(b, os.CopyFS(filepath.Join(copies, strconv.Itoa(n)), os.DirFS(plain)))
		copying += time.Since(t4)
		remove += t4.Sub(t3)
		require.NoError(b, os.RemoveAll(filepath.Join(copies, strconv.Itoa(n))))
		b.StartTimer()
		create += t1.Sub(t0)
		diff += t3.Sub(t2)
		n++
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(n) }
	b.ReportMetric(ms(create), "create-ms")
	b.ReportMetric(ms(diff), "diff-ms")
	b.ReportMetric(ms(remove), "remove-ms")
	b.ReportMetric(ms(copying), "copy-ms")
	b.ReportMetric(float64(create)/float64(copying), "create/copy")
}
