//go:build tandem_omit_mirror

package main

import "io"

// mirrors and demo need the mirror plugin's messages, which this build
// leaves out.
func mirrors(_ []string, _, stderr io.Writer) int { return withoutMirroring(stderr, "mirrors") }

func demo(_ []string, _, stderr io.Writer) int { return withoutMirroring(stderr, "demo") }

func withoutMirroring(stderr io.Writer, name string) int {
	return exit(stderr, name, usageErrorf("this binary was built without cluster mirroring (-tags tandem_omit_mirror)"))
}
