//go:build !unix

package jetstream

// lockStore takes no lock where flock is not available.
func lockStore(string) (func(), error) { return func() {}, nil }
