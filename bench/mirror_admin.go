package bench

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
)

// The mirror workload drives the destination through the mirror APIs'
// admin client, which imports only their wire format, not the plugin: it
// works in every build, and a broker without the mirror plugin refuses
// the requests itself.

func mirrorClientOpt() kgo.Opt { return admin.Opt() }

func createMirrorWith(ctx context.Context, cl *kgo.Client, name string, configs map[string]string) error {
	return admin.New(cl).CreateMirror(ctx, name, configs)
}

func addMirrorTopic(ctx context.Context, cl *kgo.Client, topic, mirror string) error {
	return admin.New(cl).AddTopicsToMirror(ctx, map[string]string{topic: mirror})
}
