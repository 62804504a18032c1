package syncbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBuffer(t *testing.T) {
	t.Run("keeps everything by default, while readers read", func(t *testing.T) {
		var b Buffer
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				for j := range 100 {
					fmt.Fprintf(&b, "%d.%d\n", i, j)
					_ = b.String()
				}
			})
		}
		wg.Wait()
		assert.Len(t, strings.Split(strings.TrimSpace(b.String()), "\n"), 400)
	})
	t.Run("Max keeps the last bytes", func(t *testing.T) {
		b := Buffer{Max: 5}
		n, err := b.Write([]byte("abc"))
		assert.NoError(t, err)
		assert.Equal(t, 3, n)
		assert.Equal(t, "abc", b.String())
		n, err = b.Write([]byte("defgh"))
		assert.NoError(t, err)
		assert.Equal(t, 5, n)
		assert.Equal(t, "defgh", b.String())
		_, _ = b.Write([]byte("0123456789"))
		assert.Equal(t, "56789", b.String())
	})
}
