//go:build tandem_omit_mirror

package main

import (
	"io"

	"github.com/tandem-kafka/tandem/cmd/tandem/internal/cli"
)

// demo starts brokers in this process with the mirror plugin, which this
// build leaves out.
func demo(_ []string, _, stderr io.Writer) int {
	return cli.Exit(stderr, "demo", cli.UsageErrorf("this binary was built without cluster mirroring (-tags tandem_omit_mirror)"))
}
