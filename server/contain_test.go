package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/plugins/groups"
	"github.com/tandem-kafka/tandem/server/plugin"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// panickyGroups is the real consumer-groups plugin with a fault: once
// boom is set, its next leadership change panics on the broker's
// metadata goroutine.
type panickyGroups struct {
	*groups.Plugin
	boom atomic.Bool
}

func (p *panickyGroups) OnLeaderChange(c plugin.LeaderChange) {
	if p.boom.Load() {
		panic("injected fault in OnLeaderChange")
	}
	p.Plugin.OnLeaderChange(c)
}

// A plugin that panics outside a request fails alone: its requests
// answer UNKNOWN_SERVER_ERROR naming it, the broker keeps serving
// produce and fetch, and it says it is not healthy.
func TestPluginPanicIsContained(t *testing.T) {
	g := &panickyGroups{Plugin: groups.New(nil, testLogger())}
	b := startBrokerWith(t, Config{Plugins: []any{g}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.DefaultProduceTopic("after"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	// Healthy: a commit and a fetch of offsets work.
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "before"); err != nil {
		t.Fatal(err)
	}
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "before", Partition: 0, At: 0, LeaderEpoch: -1})
	if resp, err := adm.CommitOffsets(ctx, "g1", offs); err != nil || resp.Error() != nil {
		t.Fatalf("commit before the fault: %v %v", err, resp.Error())
	}
	if len(b.PluginFailures()) != 0 {
		t.Fatalf("failures before the fault: %v", b.PluginFailures())
	}

	// The fault: creating a topic reports leadership to the plugin.
	g.boom.Store(true)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "after"); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, 20*time.Second, func() error {
		if n := len(b.PluginFailures()); n != 1 {
			return fmt.Errorf("%d plugin failures, want 1", n)
		}
		return nil
	})
	if f := b.PluginFailures()[0]; !strings.Contains(f, "plugin server failed") || !strings.Contains(f, "injected fault in OnLeaderChange") {
		t.Errorf("failure line %q", f)
	}

	// The broker serves on: a record produced is fetched back.
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("still serving")}).FirstErr(); err != nil {
		t.Fatalf("produce after the plugin failed: %v", err)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumeTopics("after"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	fs := cons.PollFetches(ctx)
	if err := fs.Err0(); err != nil || fs.NumRecords() != 1 || string(fs.Records()[0].Value) != "still serving" {
		t.Fatalf("fetch after the plugin failed: %d records, %v", fs.NumRecords(), err)
	}

	// The plugin's requests answer a clear error, each in its own shape.
	unknown := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, kerr.UnknownServerError) {
			t.Errorf("%s: %v, want UNKNOWN_SERVER_ERROR", what, err)
		}
	}
	resp, err := adm.CommitOffsets(ctx, "g1", offs)
	if err != nil {
		t.Fatal(err)
	}
	unknown("OffsetCommit", resp.Error())
	_, err = adm.FetchOffsets(ctx, "g1")
	unknown("OffsetFetch", err)
	_, err = adm.ListGroups(ctx)
	unknown("ListGroups", err)
	dg, err := adm.DescribeGroups(ctx, "g1")
	if err == nil {
		err = dg.Error()
	}
	unknown("DescribeGroups", err)
	// The message says which plugin, and why.
	raw, err := (&kmsg.JoinGroupRequest{Group: "g2", ProtocolType: "consumer", SessionTimeoutMillis: 6000, RebalanceTimeoutMillis: 6000,
		Protocols: []kmsg.JoinGroupRequestProtocol{{Name: "range"}}}).RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if raw.ErrorCode != kerr.UnknownServerError.Code {
		t.Errorf("JoinGroup answered %d", raw.ErrorCode)
	}

	// Metrics say which plugin failed.
	var sb strings.Builder
	b.WritePrometheus(&sb)
	for _, want := range []string{`tandem_server_plugin_failed{plugin="server"} 1`, `tandem_server_plugin_panics_total{plugin="server"} 1`} {
		if !strings.Contains(sb.String(), want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// aclPanics serves DescribeAcls, and panics on it.
type aclPanics struct{}

func (aclPanics) APIs() []plugin.API {
	return []plugin.API{plugin.Handle(kmsg.DescribeACLs, 0, 3, func(context.Context, *RequestContext, *kmsg.DescribeACLsRequest) (kmsg.Response, error) {
		panic("injected fault in DescribeAcls")
	})}
}

// A panic serving one request fails that request, not the plugin: the
// client reads an error and the connection goes on.
func TestPluginRequestPanic(t *testing.T) {
	b := startBrokerWith(t, Config{Plugins: []any{aclPanics{}}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for range 2 {
		resp, err := kmsg.NewPtrDescribeACLsRequest().RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ErrorCode != kerr.UnknownServerError.Code || resp.ErrorMessage == nil || !strings.Contains(*resp.ErrorMessage, "injected fault in DescribeAcls") {
			t.Fatalf("DescribeAcls answered %d %v", resp.ErrorCode, resp.ErrorMessage)
		}
	}
	if f := b.PluginFailures(); len(f) != 0 {
		t.Errorf("a request's panic failed the plugin: %v", f)
	}
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "t"); err != nil {
		t.Fatalf("broker after the panics: %v", err)
	}
}

// errorResponse shapes each plugin response as its request.
func TestErrorResponse(t *testing.T) {
	msg := "plugin x failed"
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version = 8
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "a", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 3}, {Partition: 5}}}}
	cr := errorResponse(commit, kerr.UnknownServerError, msg).(*kmsg.OffsetCommitResponse)
	if cr.Version != 8 || len(cr.Topics) != 1 || cr.Topics[0].Topic != "a" || len(cr.Topics[0].Partitions) != 2 ||
		cr.Topics[0].Partitions[1].Partition != 5 || cr.Topics[0].Partitions[1].ErrorCode != -1 {
		t.Errorf("OffsetCommit: %+v", cr)
	}
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{"g1", "g2"}
	dr := errorResponse(dg, kerr.UnknownServerError, msg).(*kmsg.DescribeGroupsResponse)
	if len(dr.Groups) != 2 || dr.Groups[1].Group != "g2" || dr.Groups[1].ErrorCode != -1 {
		t.Errorf("DescribeGroups: %+v", dr)
	}
	ca := kmsg.NewPtrCreateACLsRequest()
	ca.Creations = make([]kmsg.CreateACLsRequestCreation, 3)
	car := errorResponse(ca, kerr.UnknownServerError, msg).(*kmsg.CreateACLsResponse)
	if len(car.Results) != 3 || car.Results[2].ErrorCode != -1 || car.Results[2].ErrorMessage == nil || *car.Results[2].ErrorMessage != msg {
		t.Errorf("CreateAcls: %+v", car)
	}
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Version = 9
	of.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "g", Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "t", Partitions: []int32{7}}}}}
	ofr := errorResponse(of, kerr.UnknownServerError, msg).(*kmsg.OffsetFetchResponse)
	if len(ofr.Groups) != 1 || ofr.Groups[0].ErrorCode != -1 || ofr.Groups[0].Topics[0].Partitions[0].Partition != 7 ||
		ofr.Groups[0].Topics[0].Partitions[0].ErrorCode != -1 {
		t.Errorf("OffsetFetch: %+v", ofr)
	}
	jg := kmsg.NewPtrJoinGroupRequest()
	if r := errorResponse(jg, kerr.CoordinatorNotAvailable, msg).(*kmsg.JoinGroupResponse); r.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Errorf("JoinGroup: %+v", r)
	}
}

// bgPanics starts a goroutine that panics, as Host.Contain runs it.
type bgPanics struct{ stopped atomic.Bool }

func (p *bgPanics) Start(_ context.Context, host plugin.Host) error {
	go host.Contain(func() { panic("injected fault in a goroutine") })
	return nil
}
func (p *bgPanics) Stop(context.Context) error { p.stopped.Store(true); return nil }

func TestPluginGoroutinePanic(t *testing.T) {
	p := &bgPanics{}
	b := startBrokerWith(t, Config{Plugins: []any{p}})
	wait.Until(t, 20*time.Second, func() error {
		if n := len(b.PluginFailures()); n != 1 {
			return fmt.Errorf("%d plugin failures, want 1", n)
		}
		return nil
	})
	if f := b.PluginFailures()[0]; !strings.Contains(f, "injected fault in a goroutine") || !strings.Contains(f, "restart the broker") {
		t.Errorf("failure line %q", f)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if !p.stopped.Load() {
		t.Error("a failed plugin was not stopped")
	}
}
