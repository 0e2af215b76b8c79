package checker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TxnLog runs a transactional producer on a topic and remembers what it
// meant each transaction to be: committed (acknowledged), aborted, or in
// doubt (the commit failed: all of it or nothing). Every fourth
// transaction is aborted on purpose. Its values are "<txn>-<i>"; the
// topic must hold nothing else.
type TxnLog struct {
	Topic string
	ID    string // the transactional ID

	mu                          sync.Mutex
	committed, aborted, inDoubt map[string]bool // transaction -> true
	values                      map[string][]string
}

func (l *TxnLog) note(kind map[string]bool, txn string, values []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	kind[txn] = true
	l.values[txn] = values
}

// Run writes transactions of four records each until ctx ends, with a
// client made from opts (the seed brokers). It starts a new client
// after any error, as an application does after one it cannot tell from
// a fatal one.
func (l *TxnLog) Run(ctx context.Context, opts ...kgo.Opt) error {
	l.mu.Lock()
	l.committed, l.aborted, l.inDoubt, l.values = map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string][]string{}
	l.mu.Unlock()
	newClient := func() (*kgo.Client, error) {
		return kgo.NewClient(append(slices.Clone(opts), kgo.DefaultProduceTopic(l.Topic), kgo.TransactionalID(l.ID),
			kgo.TransactionTimeout(10*time.Second), kgo.RecordDeliveryTimeout(20*time.Second))...)
	}
	cl, err := newClient()
	if err != nil {
		return err
	}
	defer func() { cl.Close() }()
	for n := 0; ctx.Err() == nil; n++ {
		txn := fmt.Sprintf("t%06d", n)
		if err := cl.BeginTransaction(); err != nil {
			return fmt.Errorf("begin %s: %w", txn, err)
		}
		var values []string
		var perr error
		for i := range 4 {
			v := fmt.Sprintf("%s-%d", txn, i)
			values = append(values, v)
			if perr = cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); perr != nil {
				break
			}
		}
		commit := kgo.TransactionEndTry(n%4 != 3 && perr == nil)
		endCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := cl.EndTransaction(endCtx, commit)
		cancel()
		switch {
		case commit == kgo.TryAbort:
			// An abort that failed is never committed: the coordinator
			// aborts it on timeout or when the next client fences it.
			l.note(l.aborted, txn, values)
		case err == nil:
			l.note(l.committed, txn, values)
		default:
			l.note(l.inDoubt, txn, values)
		}
		if err != nil || perr != nil {
			cl.Close()
			if cl, err = newClient(); err != nil {
				return err
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// TxnReport is what a read_committed reader found of the transactions.
type TxnReport struct {
	Committed, Aborted, InDoubt int
	InDoubtRead                 int      // in-doubt transactions read (whole)
	Problems                    []string // a committed one not whole, an aborted one read, a value read twice...
}

// OK reports whether the transactions read back as they ended.
func (r TxnReport) OK() bool { return len(r.Problems) == 0 }

// Ran reports whether the load committed and aborted transactions.
func (r TxnReport) Ran() bool { return r.Committed > 0 && r.Aborted > 0 }

func (r TxnReport) String() string {
	s := fmt.Sprintf("transactions: %d committed (read whole), %d aborted (none read), %d in doubt (%d read whole), %d problems",
		r.Committed, r.Aborted, r.InDoubt, r.InDoubtRead, len(r.Problems))
	if len(r.Problems) > 0 {
		s += ": " + strings.Join(first(r.Problems, 20), "; ")
	}
	return s
}

// Check waits until no transaction is open on the topic (its last
// stable offsets reached its ends, within two minutes), reads it at
// read_committed and compares: every committed transaction whole,
// nothing of an aborted one, an in-doubt one whole or not at all, no
// value twice.
func (l *TxnLog) Check(ctx context.Context, opts ...kgo.Opt) (TxnReport, error) {
	if err := awaitStable(ctx, l.Topic, opts); err != nil {
		return TxnReport{}, err
	}
	read, err := ReadCommitted(ctx, l.Topic, opts...)
	if err != nil {
		return TxnReport{}, err
	}
	seen := map[string]int{}
	byTxn := map[string][]string{}
	for _, v := range read {
		seen[v]++
		txn, _, _ := strings.Cut(v, "-")
		byTxn[txn] = append(byTxn[txn], v)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := TxnReport{Committed: len(l.committed), Aborted: len(l.aborted), InDoubt: len(l.inDoubt)}
	for v, n := range seen {
		if n > 1 {
			r.Problems = append(r.Problems, fmt.Sprintf("%s read %d times", v, n))
		}
	}
	whole := func(txn string) bool {
		return slices.Equal(slices.Sorted(slices.Values(byTxn[txn])), l.values[txn])
	}
	for txn := range l.committed {
		if !whole(txn) {
			r.Problems = append(r.Problems, fmt.Sprintf("committed %s: read %v, want %v", txn, byTxn[txn], l.values[txn]))
		}
	}
	for txn := range l.aborted {
		if len(byTxn[txn]) > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("aborted %s: read %v", txn, byTxn[txn]))
		}
	}
	for txn := range l.inDoubt {
		if len(byTxn[txn]) > 0 {
			r.InDoubtRead++
			if !whole(txn) {
				r.Problems = append(r.Problems, fmt.Sprintf("in-doubt %s: part of it read: %v", txn, byTxn[txn]))
			}
		}
	}
	for txn := range byTxn {
		if !l.committed[txn] && !l.aborted[txn] && !l.inDoubt[txn] {
			r.Problems = append(r.Problems, fmt.Sprintf("%s read but never ended: %v", txn, byTxn[txn]))
		}
	}
	slices.Sort(r.Problems)
	return r, nil
}

// awaitStable waits until topic's last stable offsets equal its ends:
// every transaction on it has ended.
func awaitStable(ctx context.Context, topic string, opts []kgo.Opt) error {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		ends, err1 := adm.ListEndOffsets(ctx, topic)
		stable, err2 := adm.ListCommittedOffsets(ctx, topic)
		if err1 == nil && err2 == nil && ends.Error() == nil && stable.Error() == nil {
			same := true
			ends.Each(func(o kadm.ListedOffset) {
				s, _ := stable.Lookup(topic, o.Partition)
				same = same && s.Offset == o.Offset
			})
			if same {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: a transaction is still open two minutes after the load stopped (%v, %v)", topic, err1, err2)
		}
	}
}

// ReadCommitted reads a topic at read_committed from its start until a
// few seconds pass with nothing new; the caller makes sure every
// transaction has ended (TxnLog.Check does).
func ReadCommitted(ctx context.Context, topic string, opts ...kgo.Opt) ([]string, error) {
	cl, err := kgo.NewClient(append(slices.Clone(opts), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(500*time.Millisecond))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []string
	for quiet := time.Now(); time.Since(quiet) < 5*time.Second; {
		if ctx.Err() != nil {
			return out, fmt.Errorf("reading %s committed: %w", topic, ctx.Err())
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, string(r.Value))
			quiet = time.Now()
		})
	}
	return out, nil
}
