//go:build unix

package main

import (
	"os/signal"
	"syscall"
)

// ignoreTTIN lets tandem cluster run as a background job (tandem cluster
// &): its read of the terminal then fails instead of stopping it.
func ignoreTTIN() { signal.Ignore(syscall.SIGTTIN) }
