//go:build tandem_omit_mirror

package main

import (
	"fmt"
	"io"
	"log/slog"
)

// withMirror: the cluster mirroring plugin is compiled out.
func withMirror(ps []any, _ map[string]string, _ *slog.Logger) []any { return ps }

// mirrors and demo need the mirror plugin's messages, which this build
// leaves out.
func mirrors(_ []string, _, stderr io.Writer) int { return withoutMirroring(stderr) }

func demo(_ []string, _, stderr io.Writer) int { return withoutMirroring(stderr) }

func withoutMirroring(stderr io.Writer) int {
	fmt.Fprintln(stderr, "tandem: this binary was built without cluster mirroring (-tags tandem_omit_mirror)")
	return 2
}
