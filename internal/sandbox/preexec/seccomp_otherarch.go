//go:build linux && !amd64 && !arm64

package preexec

// thisArch is unknown: denyMPTCP refuses, and no task is confined.
var thisArch seccompArch
