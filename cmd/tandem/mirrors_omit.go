//go:build tandem_omit_mirror

package main

import (
	"fmt"
	"io"
)

// mirrors and demo need the mirror plugin's messages, which this build
// leaves out.
func mirrors(_ []string, _, stderr io.Writer) int { return withoutMirroring(stderr) }

func demo(_ []string, _, stderr io.Writer) int { return withoutMirroring(stderr) }

func withoutMirroring(stderr io.Writer) int {
	fmt.Fprintln(stderr, "tandem: this binary was built without cluster mirroring (-tags tandem_omit_mirror)")
	return 2
}
