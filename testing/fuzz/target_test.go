package fuzz

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/plugins/acl"
	"github.com/tandem-kafka/tandem/plugins/groups"
	"github.com/tandem-kafka/tandem/plugins/mirror"
	"github.com/tandem-kafka/tandem/plugins/txn"
	"github.com/tandem-kafka/tandem/server"
	"github.com/tandem-kafka/tandem/server/plugin"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// target is a broker with every plugin that tandem serve wires, a
// PLAINTEXT and a SASL_PLAINTEXT listener, and what it advertises.
type target struct {
	b           *server.Broker
	plain, sasl string // listener addresses
	apis        map[int16]kmsg.ApiVersionsResponseApiKey
	keys        []int16 // advertised, sorted
	newRequest  map[int16]func() kmsg.Request
	topicIDs    [][16]byte
	errs        *errorLog
}

// Topics, groups and the like the requests name: the fuzzed requests hit
// existing state as well as missing state.
var (
	fuzzTopics = []string{"fuzz-a", "fuzz-b", "fuzz-compact"}
	safeAddr   = "127.0.0.1:1" // nothing listens there
)

// startTarget starts the broker in dir. The limits are small, so that the
// fuzzer cannot fill the disk or memory with topics; the authentication
// throttle is off, since most fuzzed authentications fail.
func startTarget(dir string) (*target, error) {
	props := map[string]string{
		"listeners":                                 "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
		"tandem.sasl.plain.users":                   "alice:alice-secret",
		"tandem.log.sync":                           "false",
		"max.broker.partitions":                     "1000",
		"tandem.max.partitions.per.request":         "100",
		"connection.failed.authentication.delay.ms": "0",
		"offsets.topic.num.partitions":              "2",
		"transaction.state.log.num.partitions":      "2",
		"mirror.topic.num.partitions":               "2",
	}
	errs := &errorLog{}
	log := slog.New(errs)
	aclPlugin, err := acl.New(props)
	if err != nil {
		return nil, err
	}
	mp := mirror.New(props, log)
	plugins := []any{aclPlugin, groups.New(props, log), txn.New(props, log), mp}
	b, err := server.New(server.Config{DataDir: dir, Props: props, Plugins: plugins, Logger: log})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		b.Close()
		return nil, err
	}
	tg := &target{b: b, plain: b.ListenerAddr("PLAINTEXT"), sasl: b.ListenerAddr("SASL_PLAINTEXT"), errs: errs,
		apis: map[int16]kmsg.ApiVersionsResponseApiKey{}, newRequest: map[int16]func() kmsg.Request{}}
	for _, p := range plugins {
		if h, ok := p.(plugin.APIHandler); ok {
			for _, a := range h.APIs() {
				k := a.Versions.ApiKey
				tg.newRequest[k] = func() kmsg.Request {
					if a.NewRequest != nil {
						return a.NewRequest(k)
					}
					return kmsg.RequestForKey(k)
				}
			}
		}
	}
	c, err := tandemtest.DialErr(tg.plain)
	if err != nil {
		b.Close()
		return nil, err
	}
	defer c.Close()
	av, err := c.Request(&kmsg.ApiVersionsRequest{Version: 3})
	if err != nil {
		b.Close()
		return nil, err
	}
	for _, k := range av.(*kmsg.ApiVersionsResponse).ApiKeys {
		tg.apis[k.ApiKey] = k
		tg.keys = append(tg.keys, k.ApiKey)
	}
	slices.Sort(tg.keys)
	for i, name := range fuzzTopics {
		ct := kmsg.NewPtrCreateTopicsRequest()
		ct.Version, ct.TimeoutMillis = 7, 30000
		t := kmsg.NewCreateTopicsRequestTopic()
		t.Topic, t.NumPartitions, t.ReplicationFactor = name, int32(i+1), 1
		if name == "fuzz-compact" {
			t.Configs = []kmsg.CreateTopicsRequestTopicConfig{{Name: "cleanup.policy", Value: kmsg.StringPtr("compact")}}
		}
		ct.Topics = append(ct.Topics, t)
		resp, err := c.Request(ct)
		if err != nil {
			b.Close()
			return nil, err
		}
		tg.topicIDs = append(tg.topicIDs, resp.(*kmsg.CreateTopicsResponse).Topics[0].TopicID)
	}
	return tg, nil
}

// request returns an empty request of key: the plugin's type for plugin
// keys (94 is kmsg's UnregisterController but the mirror's CreateMirror),
// kmsg's otherwise; nil for a key nobody knows.
func (tg *target) request(key int16) kmsg.Request {
	if f := tg.newRequest[key]; f != nil {
		return f()
	}
	return kmsg.RequestForKey(key)
}

// send sends one request frame on a new connection and reads its answer,
// if any comes soon: a long-polling fetch or a group join may legitimately
// take longer, and that is not what the fuzzer looks for (it checks that
// the broker keeps serving other connections). SaslAuthenticate goes to
// the SASL listener after a handshake for mech; SaslHandshake too.
func (tg *target) send(key int16, frame []byte, mech string) error {
	addr := tg.plain
	if key == 17 || key == 36 {
		addr = tg.sasl
	}
	c, err := tandemtest.DialErr(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if key == 36 {
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 1, mech
		if _, err := c.Request(hs); err != nil {
			return fmt.Errorf("SASL handshake for %s: %w", mech, err)
		}
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(frame); err != nil {
		return nil // the broker may close early (a bad size): fine
	}
	c.SetReadDeadline(time.Now().Add(250 * time.Millisecond))
	c.ReadFrame()
	return nil
}

// healthy checks that the broker still serves a new connection, and that
// no request handling panicked (the broker recovers panics, so it would
// not crash: the fuzzer must see them anyway).
func (tg *target) healthy() error {
	var sb strings.Builder
	tg.b.WritePrometheus(&sb)
	if !strings.Contains(sb.String(), "\ntandem_server_request_panics_total 0\n") {
		return errors.New("a request handler panicked")
	}
	c, err := tandemtest.DialErr(tg.plain)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Request(&kmsg.ApiVersionsRequest{Version: 3}); err != nil {
		return fmt.Errorf("ApiVersions: %w", err)
	}
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 12
	if _, err := c.Request(md); err != nil {
		return fmt.Errorf("Metadata: %w", err)
	}
	return nil
}

// frame builds a request frame: header v1, or v2 for flexible versions.
func frame(key, version int16, clientID *string, flexible bool, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, 0)
	b = kbin.AppendInt16(b, key)
	b = kbin.AppendInt16(b, version)
	b = kbin.AppendInt32(b, 1)
	b = kbin.AppendNullableString(b, clientID)
	if flexible {
		b = append(b, 0)
	}
	b = append(b, body...)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// harmful reports requests the fuzzer must not send although the broker
// would survive them: those that make it connect to an address other than
// loopback (a mirror's source), and client quotas, which would throttle the
// health checks.
func (tg *target) harmful(key, version int16, body []byte) bool {
	req := tg.request(key)
	if req == nil {
		return false
	}
	req.SetVersion(version)
	if err := req.ReadFrom(body); err != nil {
		return false // the broker will not decode it either
	}
	if q, ok := req.(*kmsg.AlterClientQuotasRequest); ok && !q.ValidateOnly {
		return true
	}
	unsafe := false
	walkStrings(req, func(s string) {
		unsafe = unsafe || !loopbackOnly(s)
	})
	return unsafe
}

// loopbackOnly says whether every address s could name is loopback: the
// parts of a list that parse as host:port with a numeric port, or as a
// URL.
func loopbackOnly(s string) bool {
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == ';' || r == '"' }) {
		if _, rest, ok := strings.Cut(part, "://"); ok {
			part, _, _ = strings.Cut(rest, "/")
			if !strings.Contains(part, ":") {
				part += ":80"
			}
		}
		host, port, err := net.SplitHostPort(part)
		if err != nil || strings.Trim(port, "0123456789") != "" {
			continue
		}
		if host != "127.0.0.1" && host != "localhost" && host != "::1" {
			return false
		}
	}
	return true
}

// errorLog keeps the last error-level log lines of the broker, to show
// with a failure (a recovered panic logs its stack there).
type errorLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *errorLog) Enabled(_ context.Context, lvl slog.Level) bool { return lvl >= slog.LevelError }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	sb.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&sb, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, sb.String())
	if len(l.lines) > 20 {
		l.lines = l.lines[1:]
	}
	return nil
}
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *errorLog) WithGroup(string) slog.Handler      { return l }

func (l *errorLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
