package bench

import (
	"bytes"
	"fmt"
	"time"

	"github.com/symm-mcp/symm-mcp/internal/jetstream"
)

// proofMessages is how many spawns clusterProof hands through each path.
const proofMessages = 2000

// clusterProof is the cost of the cluster's proof (intent 0030) on the
// dispatch path: each spawn's message made and checked with the proof
// (HMAC-SHA256 signed, verified, its replay check) beside the same
// without it, interleaved in one run; the figure is the median of the
// per-spawn differences. The round trip through the cluster, the same on
// both paths, is the spawn_task(host=b) row's.
func clusterProof(t *table) error {
	body := bytes.Repeat([]byte("x"), 1024) // a spawn request with a short prompt
	with, without, err := jetstream.ProofCost(body, proofMessages)
	if err != nil {
		return err
	}
	diff := make([]time.Duration, len(with))
	for i := range with {
		diff[i] = with[i] - without[i]
	}
	cost := median(diff)
	t.check("cluster: the proof per dispatch (sign + verify)", us(cost),
		fmt.Sprintf("median of %d spawns of 1 KiB; with the proof %s, without %s (medians); p99 of the difference %s",
			len(diff), us(median(with)), us(median(without)), us(percentile(diff, 99))),
		"≤ 50 µs", cost <= 50*time.Microsecond)
	return nil
}
