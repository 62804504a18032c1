// Package syncbuf is a bytes buffer that one goroutine may write while
// another reads it: a test collecting a child's stderr or an agent's stdout
// as it comes. A test helper; it imports nothing of ours.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is safe for concurrent Write and String. The zero value keeps
// everything written; with Max set it keeps only the last Max bytes, for a
// long-lived writer whose end is what a failure message needs.
type Buffer struct {
	// Max bounds what is kept; 0 keeps all. Set it before the first Write.
	Max int

	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p, dropping the oldest bytes past Max; it never fails.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	if l.Max > 0 && l.b.Len() > l.Max {
		l.b.Next(l.b.Len() - l.Max)
	}
	return len(p), nil
}

// String returns what is kept.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
