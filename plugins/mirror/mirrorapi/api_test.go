package mirrorapi

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/internal/uuid"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// backend records what the handler asked of it.
type backend struct {
	calls   []string
	configs map[string]string
}

func (b *backend) CreateMirror(context.Context, *mirrorproto.CreateMirrorRequest) error {
	b.calls = append(b.calls, "create")
	return nil
}

func (b *backend) AddTopics(context.Context, *mirrorproto.AddTopicsToMirrorRequest) (uuid.UUID, []mirrorproto.Truncation, error) {
	b.calls = append(b.calls, "add")
	return uuid.UUID{}, nil, nil
}

func (b *backend) RemoveTopics(_ context.Context, _ string, _ []string, _ int8, timeout time.Duration, _ bool) ([]string, []mirrorproto.FailoverPartition, error) {
	b.calls = append(b.calls, "remove "+timeout.String())
	return []string{"t"}, []mirrorproto.FailoverPartition{{AlreadyStopped: true}}, nil
}

func (b *backend) LastMirrored(context.Context, *plugin.RequestContext, *mirrorproto.LastMirroredOffsetsRequest) []mirrorproto.OffsetsTopic {
	return nil
}

func (b *backend) Mirrors(context.Context, ...string) *metadata.Image {
	img := &metadata.Image{}
	img.Mirrors = map[string]*metadata.Mirror{"m": {Name: "m", Configs: map[string]string{"bootstrap.servers": "s:9092", "sasl.password": "x"}}}
	return img
}

func (b *backend) Describe(context.Context, *plugin.RequestContext, *mirrorproto.DescribeMirrorsRequest) []mirrorproto.DescribedMirror {
	return nil
}

func (b *backend) ReadStates(context.Context, *mirrorproto.ReadMirrorStatesRequest) ([]mirrorproto.StatesTopic, []mirrorproto.ShardMark, int16) {
	b.calls = append(b.calls, "read")
	return nil, nil, 0
}

func (b *backend) WriteStates(context.Context, *mirrorproto.WriteMirrorStatesRequest) []mirrorproto.ErrTopic {
	b.calls = append(b.calls, "write")
	return nil
}

func (b *backend) Pause(context.Context, string, []string, bool) error { return nil }
func (b *backend) DeleteMirror(context.Context, string) error          { return nil }

func (b *backend) BumpLeaderEpoch(context.Context, uuid.UUID, int32, int32) (int32, error) {
	return 7, nil
}

func (b *backend) CheckConfigs(map[string]string) error { return nil }

func (b *backend) AlterConfigs(_ context.Context, _ string, configs map[string]string) error {
	b.configs = configs
	return nil
}

func (b *backend) RequestTimeout() time.Duration { return 3 * time.Second }

// onlyTopics allows everything but on the cluster and on mirrors.
type onlyTopics struct{}

func (onlyTopics) Authorize(_ *plugin.RequestContext, _ kmsg.ACLOperation, typ kmsg.ACLResourceType, _ string) bool {
	return typ != kmsg.ACLResourceTypeCluster && typ != plugin.ACLResourceMirror
}

// handle serves req as the broker does: with its key's entry in h.APIs.
func handle(h *Handler, ctx context.Context, rc *plugin.RequestContext, req kmsg.Request) (kmsg.Response, error) {
	for _, a := range h.APIs() {
		if a.Versions.ApiKey == req.Key() {
			return a.Handle(ctx, rc, req)
		}
	}
	return nil, fmt.Errorf("api key %d is not served", req.Key())
}

// TestAuthorization: a caller without rights on the mirror or the
// cluster is refused before the plugin is asked; one with them reaches
// it.
func TestAuthorization(t *testing.T) {
	ctx := context.Background()
	b := &backend{}
	h := New(b)
	denied := &plugin.RequestContext{Authorizer: onlyTopics{}}
	name := "m"
	resp, err := handle(h, ctx, denied, &mirrorproto.CreateMirrorRequest{MirrorName: &name})
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.(*mirrorproto.CreateMirrorResponse).ErrorCode; c != mirrorproto.ErrMirrorAuthorizationFailed.Code {
		t.Errorf("CreateMirror without CREATE on the mirror: error %d", c)
	}
	resp, _ = handle(h, ctx, denied, &mirrorproto.ReadMirrorStatesRequest{MirrorName: "m"})
	if c := resp.(*mirrorproto.ReadMirrorStatesResponse).ErrorCode; c != kerr.ClusterAuthorizationFailed.Code {
		t.Errorf("ReadMirrorStates without CLUSTER_ACTION: error %d", c)
	}
	resp, _ = handle(h, ctx, denied, &mirrorproto.BumpLeaderEpochsRequest{Topics: []mirrorproto.BumpTopic{{Partitions: []mirrorproto.BumpPartition{{PartitionIndex: 0}}}}})
	if p := resp.(*mirrorproto.BumpLeaderEpochsResponse).Topics[0].Partitions[0]; p.ErrorCode != kerr.ClusterAuthorizationFailed.Code || p.LeaderEpoch != -1 {
		t.Errorf("BumpLeaderEpochs without CLUSTER_ACTION: %+v", p)
	}
	if len(b.calls) != 0 {
		t.Fatalf("refused requests reached the plugin: %v", b.calls)
	}

	allowed := &plugin.RequestContext{}
	for _, req := range []kmsg.Request{&mirrorproto.CreateMirrorRequest{MirrorName: &name}, &mirrorproto.ReadMirrorStatesRequest{MirrorName: "m"},
		&mirrorproto.RemoveTopicsFromMirrorRequest{MirrorName: "m"}} {
		if _, err := handle(h, ctx, allowed, req); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"create", "read", "remove 3s"}; len(b.calls) != 3 || b.calls[0] != want[0] || b.calls[1] != want[1] || b.calls[2] != want[2] {
		t.Fatalf("calls %v, want %v (a failover without a timeout gets the request timeout)", b.calls, want)
	}
}

// TestConfigs: secrets are described as sensitive, without their value;
// an alteration sets and deletes keys of the mirror's configs.
func TestConfigs(t *testing.T) {
	ctx := context.Background()
	b := &backend{}
	h := New(b)
	rc := &plugin.RequestContext{}
	got, err := h.DescribeConfigResource(ctx, rc, "m", nil)
	if err != nil || len(got) != 2 {
		t.Fatalf("described %+v, %v", got, err)
	}
	for _, c := range got {
		if c.Name == "sasl.password" && (!c.IsSensitive || c.Value != nil) {
			t.Errorf("a secret described as %+v", c)
		}
	}
	v := "t:9092"
	err = h.AlterConfigResource(ctx, rc, "m", []kmsg.IncrementalAlterConfigsRequestResourceConfig{
		{Name: "bootstrap.servers", Op: kmsg.IncrementalAlterConfigOpSet, Value: &v},
		{Name: "sasl.password", Op: kmsg.IncrementalAlterConfigOpDelete},
	}, false)
	if err != nil || len(b.configs) != 1 || b.configs["bootstrap.servers"] != v {
		t.Fatalf("altered to %v, %v", b.configs, err)
	}
	if _, err := h.DescribeConfigResource(ctx, rc, "nosuch", nil); !errors.Is(err, mirrorproto.ErrMirrorNotFound) {
		t.Errorf("a missing mirror: %v", err)
	}
}
