//go:build tandem_omit_mirror

package bench

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
)

var errNoMirroring = errors.New("this binary was built without cluster mirroring (-tags tandem_omit_mirror)")

func mirrorClientOpt() kgo.Opt { return kgo.ClientID("tandem-bench") }

func createMirror(context.Context, *kgo.Client, string, string) error { return errNoMirroring }

func addMirrorTopic(context.Context, *kgo.Client, string, string) error { return errNoMirroring }
