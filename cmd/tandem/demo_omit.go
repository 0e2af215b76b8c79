//go:build tandem_omit_mirror

package main

import "io"

// demo starts brokers in this process with the mirror plugin, which this
// build leaves out.
func demo(_ []string, _, stderr io.Writer) int {
	return exit(stderr, "demo", usageErrorf("this binary was built without cluster mirroring (-tags tandem_omit_mirror)"))
}
