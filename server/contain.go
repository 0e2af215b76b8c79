package server

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/prom"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// A plugin that panics outside a request (in a goroutine of its own, a
// timer, or a hook the broker calls from its metadata goroutines) may
// have left its state half changed and its locks held: it is marked
// failed and the broker stops calling it. The rest of the broker keeps
// serving; the plugin's requests answer UNKNOWN_SERVER_ERROR with the
// reason, /healthz answers 503 naming it, and
// tandem_server_plugin_failed says which. Only a restart brings it back.
//
// A panic while serving one request is that request's failure, not the
// plugin's: it answers an error (a malformed request must not disable a
// plugin for every client), and is counted.

// pluginFailure is why and when a plugin failed.
type pluginFailure struct {
	reason string
	at     time.Time
}

// plugins tracks the broker's plugins by name, and which have failed.
type pluginState struct {
	names map[any]string // plugin value -> name (its package's name)

	mu     sync.Mutex
	failed map[string]pluginFailure

	panics map[string]*metrics.Counter
	log    *slog.Logger // the broker's
}

// pluginName is the name of p's package: groups, txn, share, acl, mirror.
func pluginName(p any) string {
	t := reflect.TypeOf(p)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	path := t.PkgPath()
	if path == "" {
		return t.String()
	}
	return path[strings.LastIndex(path, "/")+1:]
}

// pluginFamilies are the metrics of a broker with plugins.
var pluginFamilies = []prom.Family{
	{Name: "tandem_server_plugin_failed", Type: prom.Gauge, Help: "1 once the plugin has failed (it panicked outside a request; the broker no longer calls it until restarted), else 0."},
	{Name: "tandem_server_plugin_panics_total", Type: prom.Counter, Help: "Panics of the plugin recovered by the broker, in requests and in its background work."},
}

func newPluginState(b *Broker) *pluginState {
	s := &pluginState{names: map[any]string{}, failed: map[string]pluginFailure{}, panics: map[string]*metrics.Counter{}, log: b.log}
	if len(b.cfg.Plugins) > 0 {
		b.metrics.Describe(pluginFamilies...)
	}
	for _, p := range b.cfg.Plugins {
		name := pluginName(p)
		if !isComparable(p) {
			continue
		}
		s.names[p] = name
		if _, ok := s.panics[name]; ok {
			continue
		}
		s.panics[name] = b.metrics.NewCounter(fmt.Sprintf("tandem_server_plugin_panics_total{plugin=%q}", name))
		b.metrics.NewGauge(fmt.Sprintf("tandem_server_plugin_failed{plugin=%q}", name), func() float64 {
			if _, failed := s.failure(name); failed {
				return 1
			}
			return 0
		})
	}
	return s
}

func isComparable(p any) bool { return p != nil && reflect.TypeOf(p).Comparable() }

// name is the name of plugin p (a value of Config.Plugins or one of its
// hooks, which are the same values).
func (s *pluginState) name(p any) string {
	if isComparable(p) {
		if n, ok := s.names[p]; ok {
			return n
		}
	}
	return pluginName(p)
}

func (s *pluginState) failure(name string) (pluginFailure, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.failed[name]
	return f, ok
}

// failedOf reports whether plugin p has failed.
func (s *pluginState) failedOf(p any) bool {
	_, failed := s.failure(s.name(p))
	return failed
}

// panicked records panic v of plugin name. fail marks the plugin failed
// (a panic outside a request).
func (s *pluginState) panicked(name, where string, v any, fail bool) {
	if c := s.panics[name]; c != nil {
		c.Inc()
	}
	if !fail {
		s.log.Error("plugin panicked serving a request; the request answers an error", "plugin", name, "in", where,
			"panic", v, "stack", string(debug.Stack()))
		return
	}
	s.mu.Lock()
	if _, already := s.failed[name]; !already {
		s.failed[name] = pluginFailure{reason: fmt.Sprintf("panic in %s: %v", where, v), at: time.Now()}
	}
	s.mu.Unlock()
	s.log.Error("plugin failed: it panicked; the broker no longer calls it and reports unhealthy until restarted",
		"plugin", name, "in", where, "panic", v, "stack", string(debug.Stack()))
}

// contain runs f, a piece of plugin name's work outside any request; a
// panic in it fails the plugin instead of ending the process.
func (s *pluginState) contain(name, where string, f func()) {
	defer func() {
		if v := recover(); v != nil {
			s.panicked(name, where, v, true)
		}
	}()
	f()
}

// PluginFailures lists the plugins that have failed, one line each:
// which, why and how long ago. Empty when none has.
func (b *Broker) PluginFailures() []string {
	s := b.plugins
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, name := range slices.Sorted(maps.Keys(s.failed)) {
		f := s.failed[name]
		out = append(out, fmt.Sprintf("plugin %s failed %s ago (%s); restart the broker", name,
			time.Since(f.at).Round(time.Second), f.reason))
	}
	return out
}

// errorResponse answers req with code and msg in each of its error fields
// and its lists shaped as the request's: every topic, partition or group
// asked for answers the error, as Kafka's getErrorResponse does.
func errorResponse(req kmsg.Request, err *kerr.Error, msg string) kmsg.Response {
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if d, ok := resp.(interface{ Default() }); ok {
		d.Default()
	}
	fillError(reflect.ValueOf(resp).Elem(), reflect.ValueOf(req).Elem(), err.Code, msg)
	return resp
}

// requestLists names the request list that a response list answers, where
// the two are named differently.
var requestLists = map[string][]string{
	"Results":           {"Creations", "Filters"}, // CreateAcls, DeleteAcls
	"TransactionStates": {"TransactionalIDs"},     // DescribeTransactions
}

func fillError(resp, req reflect.Value, code int16, msg string) {
	for i := range resp.NumField() {
		f, name := resp.Field(i), resp.Type().Field(i).Name
		switch {
		case !f.CanSet() || name == "Version" || name == "ThrottleMillis" || name == "UnknownTags":
		case name == "ErrorCode" && f.Kind() == reflect.Int16:
			f.SetInt(int64(code))
		case name == "ErrorMessage" && f.Type() == reflect.TypeFor[*string]():
			f.Set(reflect.ValueOf(&msg))
		case name == "ErrorMessage" && f.Kind() == reflect.String:
			f.SetString(msg)
		case req.IsValid():
			rf := req.FieldByName(name)
			for _, alt := range requestLists[name] {
				if !rf.IsValid() {
					rf = req.FieldByName(alt)
				}
			}
			if !rf.IsValid() {
				continue
			}
			if f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Struct && rf.Kind() == reflect.Slice {
				n := rf.Len()
				s := reflect.MakeSlice(f.Type(), n, n)
				for j := range n {
					el, re := s.Index(j), rf.Index(j)
					if d, ok := el.Addr().Interface().(interface{ Default() }); ok {
						d.Default()
					}
					if re.Kind() == reflect.Struct {
						fillError(el, re, code, msg)
						continue
					}
					setFirst(el, re) // a list of names or partition numbers
					fillError(el, reflect.Value{}, code, msg)
				}
				f.Set(s)
			} else if f.Type() == rf.Type() && f.Kind() != reflect.Slice {
				f.Set(rf) // the names and numbers that say what is answered
			}
		}
	}
}

// setFirst sets the first field of el of v's type to v.
func setFirst(el, v reflect.Value) {
	for i := range el.NumField() {
		if f := el.Field(i); f.Type() == v.Type() && f.CanSet() {
			f.Set(v)
			return
		}
	}
}

// stop stops l within ctx. A failed plugin may never return from
// Stop (its panic may have left a lock held): it is left behind when ctx
// ends.
func (s *pluginState) stop(ctx context.Context, l plugin.Lifecycle) error {
	if !s.failedOf(l) {
		return l.Stop(ctx)
	}
	done := make(chan error, 1)
	go s.contain(s.name(l), "Stop", func() { done <- l.Stop(ctx) })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("plugin %s failed earlier and did not stop: %w", s.name(l), ctx.Err())
	}
}
