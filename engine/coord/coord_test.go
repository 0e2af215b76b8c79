package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tandem-kafka/tandem/engine"
	"github.com/tandem-kafka/tandem/testing/wait"
)

// kv is a key-value state machine: the simplest coordinator.
type kv struct {
	mu       *sync.Mutex // guards unloaded for the test's reads
	m        map[string]string
	replayed int
	unloaded *bool
}

func (s *kv) Replay(k, v []byte) error {
	s.replayed++
	if v == nil {
		delete(s.m, string(k))
	} else {
		s.m[string(k)] = string(v)
	}
	return nil
}
func (s *kv) Loaded(*Shard) {}
func (s *kv) Unloaded() {
	s.mu.Lock()
	*s.unloaded = true
	s.mu.Unlock()
}

type fixture struct {
	eng      *engine.Engine
	rt       *Runtime
	id       engine.TopicID
	mu       sync.Mutex
	unloaded bool
	machines []*kv
}

func newFixture(t *testing.T, cfg engine.LogConfig) *fixture {
	t.Helper()
	eng, err := engine.Open(engine.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	f := &fixture{eng: eng, id: engine.TopicID{1, 2, 3}}
	if _, err := eng.Create("__test_state", f.id, 0, cfg); err != nil {
		t.Fatal(err)
	}
	f.rt = New(Config{Topic: "__test_state", Partitions: 1, New: func(int32) StateMachine {
		f.mu.Lock()
		defer f.mu.Unlock()
		m := &kv{mu: &f.mu, m: map[string]string{}, unloaded: &f.unloaded}
		f.machines = append(f.machines, m)
		return m
	}})
	f.rt.Start(engineLogs{eng}, nil, nil)
	t.Cleanup(f.rt.Stop)
	return f
}

func (f *fixture) put(t *testing.T, k, v string) {
	t.Helper()
	err := f.rt.Do(context.Background(), 0, func(sh *Shard) error {
		rec := Record{Key: []byte(k)}
		if v != "" {
			rec.Value = []byte(v)
		}
		if err := sh.Write(sh.Context(), rec); err != nil {
			return err
		}
		return sh.State().Replay(rec.Key, rec.Value)
	})
	if err != nil {
		t.Fatalf("put %s=%s: %v", k, v, err)
	}
}

func (f *fixture) get(t *testing.T) map[string]string {
	t.Helper()
	var out map[string]string
	if err := f.rt.Do(context.Background(), 0, func(sh *Shard) error {
		out = map[string]string{}
		for k, v := range sh.State().(*kv).m {
			out[k] = v
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// logRecords reads the partition's log back: what a replay would see.
func (f *fixture) logRecords(t *testing.T) (recs [][2]string) {
	t.Helper()
	p := f.eng.Partition(f.id, 0)
	offs := p.Offsets()
	for off := offs.LogStart; off < offs.HighWatermark; {
		res, err := p.Fetch(off, 1<<20, engine.ReadUncommitted)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range res.Batches {
			next, err := EachRecord(b, func(_ int64, k, v []byte) error {
				recs = append(recs, [2]string{string(k), string(v)})
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			off = next
		}
	}
	return recs
}

func TestPartitionForMatchesKafka(t *testing.T) {
	for _, c := range []struct {
		key  string
		n    int32
		want int32
	}{
		{"hello", 50, 99162322 % 50},         // "hello".hashCode() = 99162322
		{"polygenelubricants", 50, 0},        // hashCode() = Integer.MIN_VALUE; abs = 0
		{"é", 50, 233 % 50},                  // one UTF-16 unit
		{"😀", 50, (31*0xD83D + 0xDE00) % 50}, // a surrogate pair
		{"", 50, 0},
		{"my-group", 1, 0},
	} {
		if got := PartitionFor(c.key, c.n); got != c.want {
			t.Errorf("PartitionFor(%q, %d) = %d, want %d", c.key, c.n, got, c.want)
		}
	}
	// Negative hashes: "group-with-a-long-name".hashCode() is computed
	// by hand below, with int32 overflow as Java has it.
	var h int32
	for _, c := range "group-with-a-long-name" {
		h = 31*h + int32(c)
	}
	if want := (h & 0x7fffffff) % 50; PartitionFor("group-with-a-long-name", 50) != want {
		t.Errorf("long name: got %d want %d", PartitionFor("group-with-a-long-name", 50), want)
	}
}

func TestWriteThenAnswer(t *testing.T) {
	f := newFixture(t, engine.DefaultLogConfig())
	f.rt.SetLeader(f.id, 0, true, 1)
	f.put(t, "a", "1")
	// Do returned: the record must already be in the log and readable.
	if got := f.logRecords(t); len(got) != 1 || got[0] != [2]string{"a", "1"} {
		t.Fatalf("log after put = %v", got)
	}
	// A failed write leaves memory untouched: writes to a deleted
	// partition fail with NOT_COORDINATOR and the op does not apply.
	if err := f.eng.Delete(f.id, 0); err != nil {
		t.Fatal(err)
	}
	err := f.rt.Do(context.Background(), 0, func(sh *Shard) error {
		if err := sh.Write(sh.Context(), Record{Key: []byte("b"), Value: []byte("2")}); err != nil {
			return err
		}
		sh.State().(*kv).m["b"] = "2"
		return nil
	})
	if !errors.Is(err, kerr.NotCoordinator) {
		t.Fatalf("write to deleted partition: %v, want NOT_COORDINATOR", err)
	}
	if got := f.get(t); len(got) != 1 {
		t.Fatalf("state after failed write = %v", got)
	}
}

func TestLoadOnLeadership(t *testing.T) {
	f := newFixture(t, engine.DefaultLogConfig())
	// Not led yet: NOT_COORDINATOR.
	if err := f.rt.Do(context.Background(), 0, func(*Shard) error { return nil }); !errors.Is(err, kerr.NotCoordinator) {
		t.Fatalf("Do before leadership: %v", err)
	}
	f.rt.SetLeader(f.id, 0, true, 1)
	for i := range 20 {
		f.put(t, fmt.Sprintf("k%d", i%5), fmt.Sprint(i))
	}
	f.put(t, "k0", "") // tombstone
	want := f.get(t)
	if len(want) != 4 || want["k4"] != "19" {
		t.Fatalf("state = %v", want)
	}
	// Lose and regain: a fresh state machine replays the log.
	f.rt.SetLeader(f.id, 0, false, 1)
	f.rt.SetLeader(f.id, 0, true, 2)
	got := f.get(t)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("replayed %v, want %v", got, want)
	}
	f.mu.Lock()
	n := len(f.machines)
	replayed := f.machines[n-1].replayed
	f.mu.Unlock()
	if n != 2 || replayed != 21 {
		t.Fatalf("%d machines, last replayed %d records; want 2 and 21", n, replayed)
	}
	// A new epoch of our own leadership keeps the state: no reload.
	f.rt.SetLeader(f.id, 0, true, 3)
	f.put(t, "k9", "x")
	f.mu.Lock()
	n = len(f.machines)
	f.mu.Unlock()
	if n != 2 || f.rt.Shard(0).Epoch() != 3 {
		t.Fatalf("epoch bump reloaded: %d machines, epoch %d", n, f.rt.Shard(0).Epoch())
	}
}

// TestNotRunning: before Start and after Stop the runtime answers
// COORDINATOR_NOT_AVAILABLE and loads nothing (the broker reports
// leadership only once its plugins have started).
func TestNotRunning(t *testing.T) {
	id := engine.TopicID{9}
	eng := openWith(t, "__t", id, 3)
	var mu sync.Mutex
	var unloaded bool
	rt := New(Config{Topic: "__t", Partitions: 4, New: func(int32) StateMachine {
		return &kv{mu: &mu, m: map[string]string{}, unloaded: &unloaded}
	}})
	noop := func(*Shard) error { return nil }
	if err := rt.Do(context.Background(), 3, noop); !errors.Is(err, kerr.CoordinatorNotAvailable) {
		t.Fatalf("before Start: %v", err)
	}
	rt.SetLeader(id, 3, true, 0) // ignored: not running
	if rt.Shard(3) != nil {
		t.Fatal("a shard loads before Start")
	}
	rt.Start(engineLogs{eng}, nil, nil)
	if err := rt.Do(context.Background(), 3, noop); !errors.Is(err, kerr.NotCoordinator) {
		t.Fatalf("started, not leader: %v", err)
	}
	rt.SetLeader(id, 3, true, 0)
	if err := rt.Do(context.Background(), 3, noop); err != nil {
		t.Fatal(err)
	}
	rt.Stop()
	if err := rt.Do(context.Background(), 3, noop); !errors.Is(err, kerr.CoordinatorNotAvailable) {
		t.Fatalf("after Stop: %v", err)
	}
}

// openWith opens an engine, closed when the test ends, holding partition
// p of topic.
func openWith(t *testing.T, topic string, id engine.TopicID, p int32) *engine.Engine {
	t.Helper()
	eng, err := engine.Open(engine.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	if _, err := eng.Create(topic, id, p, engine.DefaultLogConfig()); err != nil {
		t.Fatal(err)
	}
	return eng
}

// blockingUnload is a state machine whose Unloaded waits for release.
type blockingUnload struct {
	kv
	entered chan struct{}
	release chan struct{}
}

func (s *blockingUnload) Unloaded() {
	close(s.entered)
	<-s.release
}

// TestStopWaitsForUnload: a shard dropped by a leadership change unloads
// in the background, and Stop returns only once that has finished, so
// that no goroutine of the runtime outlives it.
func TestStopWaitsForUnload(t *testing.T) {
	id := engine.TopicID{7}
	eng := openWith(t, "__t", id, 0)
	sm := &blockingUnload{kv: kv{m: map[string]string{}}, entered: make(chan struct{}), release: make(chan struct{})}
	rt := New(Config{Topic: "__t", Partitions: 1, New: func(int32) StateMachine { return sm }})
	rt.Start(engineLogs{eng}, nil, nil)
	rt.SetLeader(id, 0, true, 0)
	if err := rt.Do(context.Background(), 0, func(*Shard) error { return nil }); err != nil {
		t.Fatal(err)
	}
	rt.SetLeader(id, 0, false, 0)
	<-sm.entered // the unload runs, and waits
	stopped := make(chan struct{})
	go func() { rt.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a shard was still unloading")
	case <-time.After(200 * time.Millisecond):
	}
	close(sm.release)
	<-stopped
}

func TestCompactionKeepsLatest(t *testing.T) {
	cfg := engine.DefaultLogConfig()
	cfg.Compact, cfg.Delete = true, false
	cfg.SegmentBytes = 1 // a segment per batch
	f := newFixture(t, cfg)
	f.rt.SetLeader(f.id, 0, true, 1)
	for i := range 300 {
		f.put(t, fmt.Sprintf("k%d", i%3), fmt.Sprint(i))
	}
	f.put(t, "last", "x") // compaction never touches the active segment
	before := len(f.logRecords(t))
	if err := f.eng.EnforceRetention(time.Now()); err != nil {
		t.Fatal(err)
	}
	after := f.logRecords(t)
	if before != 301 || len(after) > 10 {
		t.Fatalf("compaction: %d records before, %d after", before, len(after))
	}
	f.rt.SetLeader(f.id, 0, false, 1)
	f.rt.SetLeader(f.id, 0, true, 2)
	got := f.get(t)
	want := map[string]string{"k0": "297", "k1": "298", "k2": "299", "last": "x"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after compaction and replay: %v, want %v", got, want)
	}
}

func TestResignationDropsState(t *testing.T) {
	f := newFixture(t, engine.DefaultLogConfig())
	f.rt.SetLeader(f.id, 0, true, 1)
	f.put(t, "a", "1")
	// A request waiting on the shard while leadership goes: it must get
	// NOT_COORDINATOR, not run against dropped state.
	sh := f.rt.Shard(0)
	entered, release := make(chan struct{}), make(chan struct{})
	go sh.Do(context.Background(), func(*Shard) error { close(entered); <-release; return nil })
	<-entered
	waiting := make(chan error)
	go func() { waiting <- sh.Do(context.Background(), func(*Shard) error { return nil }) }()
	time.Sleep(20 * time.Millisecond)
	f.rt.SetLeader(f.id, 0, false, 1)
	close(release)
	if err := <-waiting; !errors.Is(err, kerr.NotCoordinator) {
		t.Fatalf("pending request after resignation: %v", err)
	}
	if err := f.rt.Do(context.Background(), 0, func(*Shard) error { return nil }); !errors.Is(err, kerr.NotCoordinator) {
		t.Fatalf("request after resignation: %v", err)
	}
	// The old shard unloads in the background: wait for it, boundedly.
	wait.Until(t, 5*time.Second, func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if !f.unloaded {
			return errors.New("the state machine is not unloaded")
		}
		return nil
	})
	// Timers of a dropped shard never fire.
	fired := make(chan struct{})
	sh.AfterFunc(time.Millisecond, func() { close(fired) })
	select {
	case <-fired:
		t.Fatal("timer fired on a dropped shard")
	case <-time.After(30 * time.Millisecond):
	}
}

// TestLoadToLogEnd: a new leader's shard replays its log to the log end,
// records above the high watermark included (what the previous leader
// wrote and this replica copied before the followers had it), as Kafka's
// coordinator loader does: its log is the partition's from now on.
func TestLoadToLogEnd(t *testing.T) {
	f := newFixture(t, engine.DefaultLogConfig())
	p := f.eng.Partition(f.id, 0)
	if err := p.SetReplicated(true); err != nil {
		t.Fatal(err)
	}
	f.rt.SetLeader(f.id, 0, true, 1)
	f.put(t, "a", "1")
	f.put(t, "b", "2")
	if offs := p.Offsets(); offs.HighWatermark != 0 || offs.LogEnd != 2 {
		t.Fatalf("offsets %+v: want the records above the high watermark", offs)
	}
	f.rt.SetLeader(f.id, 0, false, 1)
	f.rt.SetLeader(f.id, 0, true, 2)
	if got := f.get(t); got["a"] != "1" || got["b"] != "2" || len(got) != 2 {
		t.Fatalf("loaded %v, want a=1 b=2", got)
	}
}

// engineLogs is the engine's partitions as the runtime takes them.
type engineLogs struct{ e *engine.Engine }

func (l engineLogs) Partition(id engine.TopicID, partition int32) Log {
	if p := l.e.Partition(id, partition); p != nil {
		return p
	}
	return nil
}
