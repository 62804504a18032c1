package jetstream

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// ProofCost measures what the cluster's proof adds to the dispatch path
// (make bench's cluster rows, intent 0030): n spawns of body, each
// message made as Dispatch makes it and checked as Serve checks it,
// with the proof (signed, and verified with its replay check under a
// key of MinKeyBytes) and without it, interleaved. It returns the time
// of each message on either path; the network round trip, the same on
// both, is not in them.
func ProofCost(body []byte, n int) (with, without []time.Duration, err error) {
	if n <= 0 {
		return nil, nil, errors.New("ProofCost: n must be positive")
	}
	key := make([]byte, MinKeyBytes)
	_, _ = rand.Read(key)
	p := newProver(key)
	reply := "_INBOX." + hex.EncodeToString(key[:11]) + "."
	one := func(p *prover, i int) (time.Duration, error) {
		id := fmt.Sprintf("0193b2c4-5d6e-7f80-9a1b-%012d", i)
		began := time.Now()
		m := spawnMsg(p, "b", id, reply+id, body)
		err := checkSpawn(p, m.Header, m.Subject, m.Data, true)
		return time.Since(began), err
	}
	for i := range n {
		d, err := one(p, i)
		if err != nil {
			return nil, nil, err
		}
		with = append(with, d)
		if d, err = one(nil, i); err != nil {
			return nil, nil, err
		}
		without = append(without, d)
	}
	return with, without, nil
}
