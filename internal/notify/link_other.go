//go:build !linux

package notify

import (
	"errors"
	"os"
)

// Elsewhere than Linux there is no O_TMPFILE: markers are made one by one
// (place).
func openSource(string) (*os.File, error) { return nil, errors.ErrUnsupported }

func linkSource(*os.File, string) error { return errors.ErrUnsupported }

func tooManyLinks(error) bool { return false }
