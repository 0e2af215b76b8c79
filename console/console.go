// Package console is the broker's read-only web console, served on the
// --http address at "/": the cluster, its topics, the consumer groups and
// the mirrors (per-partition lag, the RPO a failover would pay now, an
// hour of lag history, the divergence manifest).
//
// The page is one embedded bundle (ui/: HTML, CSS and JavaScript without
// a framework) that polls a JSON endpoint per page (/api/cluster,
// /api/topics, /api/groups, /api/mirrors). Nothing on it changes the
// broker: actions stay in the CLI and the Kafka APIs. What it shows comes
// from the metadata image, the storage engine and two plugin capabilities
// (plugin.GroupDescriber, plugin.MirrorDescriber); without the plugin
// that offers one, its page is empty.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/raftmeta"
	"github.com/tandem-kafka/tandem/server/plugin"
)

// Broker is what the console reads of a broker; *server.Broker
// implements it.
type Broker interface {
	NodeID() int32
	Metadata() *raftmeta.Controller
	Engine() *engine.Engine
	Plugins() []any
	// Authorizing reports whether an authorizer is on: then every page
	// asks for HTTP Basic credentials, which Authenticate checks against
	// the broker's SASL users (and that they may describe the cluster).
	Authorizing() bool
	Authenticate(ctx context.Context, remoteAddr, user, password string) (principal string, err error)
}

//go:embed ui
var bundle embed.FS

// History is what the mirrors page charts: one sample of each mirror's
// lag every historyStep, for the last hour, in memory only.
const (
	historyStep = 10 * time.Second
	historyLen  = int(time.Hour / historyStep)
)

// answerTimeout bounds what one page request waits for coordinators.
const answerTimeout = 5 * time.Second

// Console serves the console. Run must run for the lag history to fill.
type Console struct {
	b     Broker
	log   *slog.Logger
	ready func() bool
	mux   *http.ServeMux

	mu      sync.Mutex
	history map[string]*history // by mirror name
}

// New returns the console of b. ready reports whether b has started;
// until it has, the API answers 503.
func New(b Broker, log *slog.Logger, ready func() bool) *Console {
	c := &Console{b: b, log: log, ready: ready, mux: http.NewServeMux(), history: map[string]*history{}}
	ui, err := fs.Sub(bundle, "ui")
	if err != nil {
		panic(err) // the bundle is compiled in
	}
	c.mux.Handle("GET /", http.FileServerFS(ui))
	c.api("/api/cluster", c.cluster)
	c.api("/api/topics", c.topics)
	c.api("/api/groups", c.groups)
	c.api("/api/mirrors", c.mirrors)
	return c
}

func (c *Console) api(path string, build func(ctx context.Context) any) {
	c.mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
		if !c.ready() {
			http.Error(w, "the broker is starting", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), answerTimeout)
		defer cancel()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if err := json.NewEncoder(w).Encode(build(ctx)); err != nil {
			c.log.Debug("console: writing an answer", "path", path, "err", err)
		}
	})
}

// ServeHTTP serves GET and HEAD only (the console is read-only), behind
// HTTP Basic authentication when the broker authorizes.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "the console is read-only", http.StatusMethodNotAllowed)
		return
	}
	if c.b.Authorizing() {
		user, pw, ok := r.BasicAuth()
		if !ok {
			unauthorized(w)
			return
		}
		if !c.ready() {
			http.Error(w, "the broker is starting", http.StatusServiceUnavailable)
			return
		}
		if _, err := c.b.Authenticate(r.Context(), r.RemoteAddr, user, pw); errors.Is(err, kerr.ClusterAuthorizationFailed) {
			http.Error(w, "the console needs DESCRIBE on the cluster", http.StatusForbidden)
			return
		} else if err != nil {
			c.log.Info("console: authentication failed", "client", r.RemoteAddr, "user", user, "err", err)
			unauthorized(w)
			return
		}
	}
	c.mux.ServeHTTP(w, r)
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Basic realm="tandem", charset="UTF-8"`)
	http.Error(w, "a SASL user and password are needed", http.StatusUnauthorized)
}

// Run samples every mirror's lag into the history each historyStep
// until ctx ends.
func (c *Console) Run(ctx context.Context) {
	t := time.NewTicker(historyStep)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, answerTimeout)
		c.sample(sctx, time.Now())
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *Console) sample(ctx context.Context, now time.Time) {
	d, ok := plugin.Find[plugin.MirrorDescriber](c.b.Plugins())
	if !ok {
		return
	}
	seen := map[string]bool{}
	for _, m := range d.DescribeMirrors(ctx) {
		seen[m.Name] = true
		r := rpoOf(m.Partitions)
		c.mu.Lock()
		h := c.history[m.Name]
		if h == nil {
			h = &history{}
			c.history[m.Name] = h
		}
		h.add(point{Time: now.UnixMilli(), Records: r.Records, Ms: r.Ms})
		c.mu.Unlock()
	}
	c.mu.Lock()
	for name := range c.history {
		if !seen[name] {
			delete(c.history, name)
		}
	}
	c.mu.Unlock()
}

// point is one sample of a mirror's RPO; -1: unknown.
type point struct {
	Time    int64 `json:"t"` // Unix ms
	Records int64 `json:"records"`
	Ms      int64 `json:"ms"`
}

// history is a ring of the last historyLen points.
type history struct {
	points [historyLen]point
	next   int
	n      int
}

func (h *history) add(p point) {
	h.points[h.next] = p
	h.next = (h.next + 1) % historyLen
	h.n = min(h.n+1, historyLen)
}

// list returns the points, oldest first.
func (h *history) list() []point {
	out := make([]point, 0, h.n)
	for i := range h.n {
		out = append(out, h.points[(h.next-h.n+i+historyLen)%historyLen])
	}
	return out
}

func (c *Console) historyOf(name string) []point {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.history[name]; h != nil {
		return h.list()
	}
	return []point{}
}
