package tandem_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem"
	"github.com/tandem-kafka/tandem/server"
	"github.com/tandem-kafka/tandem/server/plugin"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestRequestsWhileStarting sends a request for every API of every plugin
// of this build (and the broker APIs that call plugins: FindCoordinator,
// transactional InitProducerId) while a broker with coordinator state on
// disk starts, its first plugin slow to start. None is answered before
// every plugin has started; each is then answered, never with a closed
// connection nor a crash, with what a running broker answers or with a
// retriable error: a request never reaches a plugin that is not ready.
func TestRequestsWhileStarting(t *testing.T) {
	tandemtest.Long(t)
	dir := t.TempDir()
	props := map[string]string{}
	plugins, err := tandem.Plugins(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"offsets.topic.num.partitions", "transaction.state.log.num.partitions", "mirror.topic.num.partitions"} {
		if slices.ContainsFunc(plugin.All[plugin.PropsOwner](plugins), func(o plugin.PropsOwner) bool { return o.OwnsProp(key) }) {
			props[key] = "3" // small internal topics: a quick test
		}
	}
	reqs := startupRequests(plugins)

	// A running broker's answers, which also leave state on disk: a
	// group with offsets, a transactional id, internal topics.
	b := tandemtest.StartInProcessIn(t, dir, props)
	addr := b.Addr()
	tandemtest.CreateTopic(t, addr, "t-start", 1)
	ready := readyCodes(t, addr, reqs)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	// Restart on the same port, with a first plugin whose Start waits:
	// every request is sent while the plugins start.
	if plugins, err = tandem.Plugins(props, tandemtest.Logger(t)); err != nil {
		t.Fatal(err)
	}
	slow := &slowStart{entered: make(chan struct{}), release: make(chan struct{})}
	b, err = server.New(server.Config{DataDir: dir, Listen: addr, Props: props, Logger: tandemtest.Logger(t),
		Plugins: append([]any{slow}, plugins...)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	started := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		started <- b.Start(ctx)
	}()
	<-slow.entered // the listeners are bound
	type answer struct {
		resp  kmsg.Response
		err   error
		early bool // answered while a plugin was starting
	}
	var released atomic.Bool
	answers := make([]answer, len(reqs))
	var sent, answered sync.WaitGroup
	for i, r := range reqs {
		sent.Add(1)
		answered.Add(1)
		go func() {
			defer answered.Done()
			c, err := tandemtest.DialErr(addr)
			if err != nil {
				answers[i].err = err
				sent.Done()
				return
			}
			defer c.Close()
			sent.Done()
			answers[i].resp, answers[i].err = c.Request(r.req)
			answers[i].early = !released.Load()
		}()
	}
	sent.Wait()
	time.Sleep(200 * time.Millisecond) // time enough to answer, were the broker serving
	released.Store(true)
	close(slow.release)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	answered.Wait()
	for i, r := range reqs {
		a := answers[i]
		switch {
		case a.err != nil:
			t.Errorf("%s while starting: %v", r.name, a.err)
			continue
		case a.early:
			t.Errorf("%s was answered before every plugin had started", r.name)
		}
		for _, code := range errorCodes(a.resp) {
			if code != 0 && !ready[r.name][code] && !kerr.IsRetriable(kerr.ErrorForCode(code)) {
				t.Errorf("%s while starting: error %d (%v), neither retriable nor what a running broker answers (%v)",
					r.name, code, kerr.ErrorForCode(code), ready[r.name])
			}
		}
	}
	// And the broker goes on to serve them all.
	readyCodes(t, addr, reqs)
}

// slowStart is a plugin whose Start waits for release.
type slowStart struct{ entered, release chan struct{} }

func (s *slowStart) Start(context.Context, plugin.Host) error {
	close(s.entered)
	<-s.release
	return nil
}

func (s *slowStart) Stop(context.Context) error { return nil }

type startupRequest struct {
	name string
	req  kmsg.Request
}

// startupRequests has a request for every API key the plugins serve, at
// its highest version: the plugin's empty request, filled in for the
// consumer-group and transaction APIs so that they reach a coordinator
// shard (group g-start, transactional id tx-start, topic t-start).
func startupRequests(plugins []any) []startupRequest {
	const group, txnID, topic, none = "g-start", "tx-start", "t-start", "none"
	fill := map[int16]func(r kmsg.Request){
		8: func(r kmsg.Request) {
			q := r.(*kmsg.OffsetCommitRequest)
			q.Group, q.Generation = group, -1
			q.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1, LeaderEpoch: -1}}}}
		},
		9: func(r kmsg.Request) {
			r.(*kmsg.OffsetFetchRequest).Groups = []kmsg.OffsetFetchRequestGroup{{Group: group}}
		},
		11: func(r kmsg.Request) {
			q := r.(*kmsg.JoinGroupRequest)
			q.Group, q.ProtocolType, q.SessionTimeoutMillis, q.RebalanceTimeoutMillis = "g-join", "consumer", 30000, 30000
			q.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range"}}
		},
		12: func(r kmsg.Request) {
			q := r.(*kmsg.HeartbeatRequest)
			q.Group, q.MemberID, q.Generation = group, none, 1
		},
		13: func(r kmsg.Request) {
			q := r.(*kmsg.LeaveGroupRequest)
			q.Group, q.Members = group, []kmsg.LeaveGroupRequestMember{{MemberID: none}}
		},
		14: func(r kmsg.Request) {
			q := r.(*kmsg.SyncGroupRequest)
			q.Group, q.MemberID, q.Generation = group, none, 1
		},
		15: func(r kmsg.Request) { r.(*kmsg.DescribeGroupsRequest).Groups = []string{group} },
		42: func(r kmsg.Request) { r.(*kmsg.DeleteGroupsRequest).Groups = []string{none} },
		47: func(r kmsg.Request) { r.(*kmsg.OffsetDeleteRequest).Group = none },
		28: func(r kmsg.Request) {
			q := r.(*kmsg.TxnOffsetCommitRequest)
			q.TransactionalID, q.Group, q.ProducerID, q.Generation = none, group, 1<<40, -1
			q.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1, LeaderEpoch: -1}}}}
		},
		24: func(r kmsg.Request) {
			q := r.(*kmsg.AddPartitionsToTxnRequest)
			q.Transactions = []kmsg.AddPartitionsToTxnRequestTransaction{{TransactionalID: none, ProducerID: 1 << 40,
				Topics: []kmsg.AddPartitionsToTxnRequestTransactionTopic{{Topic: topic, Partitions: []int32{0}}}}}
		},
		25: func(r kmsg.Request) {
			q := r.(*kmsg.AddOffsetsToTxnRequest)
			q.TransactionalID, q.ProducerID, q.Group = none, 1<<40, group
		},
		26: func(r kmsg.Request) { q := r.(*kmsg.EndTxnRequest); q.TransactionalID, q.ProducerID = none, 1<<40 },
		65: func(r kmsg.Request) { r.(*kmsg.DescribeTransactionsRequest).TransactionalIDs = []string{txnID, none} },
	}
	var out []startupRequest
	for _, h := range plugin.All[plugin.APIHandler](plugins) {
		for _, a := range h.APIs() {
			k := a.Versions
			r := kmsg.RequestForKey(k.ApiKey)
			if a.NewRequest != nil {
				r = a.NewRequest(k.ApiKey)
			}
			r.SetVersion(k.MaxVersion)
			if f := fill[k.ApiKey]; f != nil {
				f(r)
			}
			out = append(out, startupRequest{fmt.Sprintf("%T key %d v%d", r, k.ApiKey, k.MaxVersion), r})
		}
	}
	if _, ok := plugin.Find[plugin.CoordinatorLocator](plugins); ok {
		r := kmsg.NewPtrFindCoordinatorRequest()
		r.Version, r.CoordinatorKeys = 4, []string{group}
		out = append(out, startupRequest{"FindCoordinator group", r})
		for _, kt := range []int8{plugin.CoordinatorTransaction, plugin.CoordinatorMirror} {
			r := kmsg.NewPtrFindCoordinatorRequest()
			r.Version, r.CoordinatorType, r.CoordinatorKeys = 4, kt, []string{txnID}
			out = append(out, startupRequest{fmt.Sprintf("FindCoordinator key type %d", kt), r})
		}
	}
	if _, ok := plugin.Find[plugin.TxnCoordinator](plugins); ok {
		r := kmsg.NewPtrInitProducerIDRequest()
		r.Version, r.TransactionalID, r.TransactionTimeoutMillis = 4, kmsg.StringPtr(txnID), 60000
		out = append(out, startupRequest{"InitProducerId transactional", r})
	}
	return out
}

// readyCodes sends reqs until every answer is free of retriable errors
// (the coordinators have loaded) and returns the codes of that round,
// by request.
func readyCodes(t *testing.T, addr string, reqs []startupRequest) map[string]map[int16]bool {
	t.Helper()
	c := tandemtest.Dial(t, addr)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		codes := map[string]map[int16]bool{}
		var retriable []string
		for _, r := range reqs {
			resp, err := c.Request(r.req)
			if err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
			codes[r.name] = map[int16]bool{}
			for _, code := range errorCodes(resp) {
				codes[r.name][code] = true
				if kerr.IsRetriable(kerr.ErrorForCode(code)) {
					retriable = append(retriable, fmt.Sprintf("%s: %v", r.name, kerr.ErrorForCode(code)))
				}
			}
		}
		if len(retriable) == 0 {
			return codes
		}
		if time.Now().After(deadline) {
			t.Fatalf("a running broker still answers retriable errors: %v", retriable)
		}
	}
}

// errorCodes lists every ErrorCode field of a response, at any depth.
func errorCodes(resp kmsg.Response) []int16 {
	var out []int16
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case reflect.Slice:
			for i := range v.Len() {
				walk(v.Index(i))
			}
		case reflect.Struct:
			for i := range v.NumField() {
				f := v.Type().Field(i)
				if !f.IsExported() {
					continue
				}
				if f.Name == "ErrorCode" && f.Type.Kind() == reflect.Int16 {
					out = append(out, int16(v.Field(i).Int()))
				}
				walk(v.Field(i))
			}
		}
	}
	walk(reflect.ValueOf(resp))
	return out
}
