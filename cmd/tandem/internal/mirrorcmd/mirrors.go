// Package mirrorcmd is `tandem mirrors` (KIP-1279's kafka-mirrors.sh) on the
// destination cluster: creating mirrors, adding and removing topics,
// pausing, describing, altering configs, failover and failback, the
// diverged ranges; and the mirror states that `tandem topics describe`
// and `tandem cluster health` show.
package mirrorcmd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/cmd/tandem/internal/cli"
	"github.com/tandem-kafka/tandem/internal/kafkaclient"
	"github.com/tandem-kafka/tandem/plugins/mirror/admin"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorcfg"
	"github.com/tandem-kafka/tandem/plugins/mirror/mirrorproto"
)

// mirrorsCmd is one run of `tandem mirrors`: its flags and its client.
type mirrorsCmd struct {
	stdout, stderr io.Writer
	stdin          io.Reader
	interactive    bool // stdin is a terminal: ask before truncating
	a              *admin.Client
	client         cli.ClientFlags
	name, source   string
	topics         cli.MultiFlag
	configs        cli.MultiFlag
	deleteConfigs  cli.MultiFlag
	asJSON, yes    bool
	force          bool
	consistent     bool
	noValidate     bool
	timeout        time.Duration
	exclude        []string // --exclude: patterns --add (--start) leaves out
	failedOnly     bool     // --failed: --describe lists FAILED partitions only
	mirrorConfig   string   // --mirror-config FILE: the mirror's configs, bootstrap.servers among them
}

// mirrorsOp is one operation of `tandem mirrors`, chosen by its flag.
type mirrorsOp struct {
	name, usage string
	run         func(context.Context) error
	check       func() error // the flags it needs, checked before connecting
	on          bool
}

// errUnhealthy makes --describe exit 1 after printing: a partition is
// FAILED or cannot be copied (its source unreachable, say).
var errUnhealthy = errors.New("")

const mirrorsDoc = `Manages Cluster Mirroring (KIP-1279) on the destination cluster named by
--bootstrap-server: creates mirrors of a source cluster, adds topics to them
(byte-for-byte copies with the same offsets and topic IDs), shows their lag,
fails them over and back. The flags are those of Apache Kafka's
kafka-mirrors.sh, plus --failover, --failback and --diverged; the KIP's
current spellings (--start, --stop, --topics, --exclude, --mirror-config,
--failed) work too.

Usage: tandem mirrors --bootstrap-server HOST:PORT[,HOST:PORT...] --OPERATION [flags]
`

// Run is `tandem mirrors`, the KIP's kafka-mirrors.sh.
func Run(args []string, stdout, stderr io.Writer) int {
	c := &mirrorsCmd{stdout: stdout, stderr: stderr, stdin: os.Stdin}
	if out, ok := stdout.(*os.File); ok {
		c.interactive = isTerminal(os.Stdin) && isTerminal(out)
	}
	fs := cli.NewFlags("mirrors", mirrorsDoc)
	c.client.Register(fs, "destination cluster")
	ops := []*mirrorsOp{
		{name: "create", run: c.create, usage: "create --mirror from --source-bootstrap with --config k=v; with --add, add --topic to it too"},
		{name: "add", run: c.add, usage: "add --topic to --mirror; a topic that exists here with records is truncated to the source's log: what that removes is shown first, and needs --yes"},
		{name: "remove", run: c.remove, usage: "remove --topic (a regular expression) from --mirror at once: failover, the KIP's raw meaning"},
		{name: "failover", run: c.failover, usage: "safe promote of --mirror (or only --topic): wait up to --timeout for lag 0 against the source, then fail over; refuses if that does not happen or the source is unreachable, unless --force, which reports the lag given up"},
		{name: "failback", run: c.failback, usage: "on the old primary (--bootstrap-server): mirror --mirror's failed-over topics (or only --topic) back from the new one (--source-bootstrap, --config), showing what truncation removes first"},
		{name: "pause", run: func(ctx context.Context) error { return c.pauseResume(ctx, true) }, usage: "pause --mirror (optionally only --topic)"},
		{name: "resume", run: func(ctx context.Context) error { return c.pauseResume(ctx, false) }, usage: "resume --mirror (optionally only --topic)"},
		{name: "delete", run: c.deleteMirror, usage: "delete --mirror: each of its topics fails over first (becomes writable, keeps its data), then the mirror is gone"},
		{name: "list", run: c.list, usage: "list mirrors"},
		{name: "describe", run: c.describe, usage: "describe mirrors (or --mirror, --topic) with their lag; exits 1 if a partition is FAILED or cannot reach its source"},
		{name: "describe-config", run: c.describeConfig, usage: "print the configs of --mirror (secrets masked)"},
		{name: "alter", run: c.alter, usage: "alter the configs of --mirror: --config k=v sets, --delete-config k removes"},
		{name: "diverged", run: c.diverged, usage: "print the divergence manifest of --mirror: records truncations removed, copied to <topic>.diverged"},
	}
	checks := c.opChecks()
	for _, op := range ops {
		op.check = checks[op.name]
		fs.BoolVar(&op.on, op.name, false, op.usage)
	}
	fs.BoolVar(&c.asJSON, "json", false, "print JSON (--list, --describe, --describe-config, --diverged, --failover)")
	fs.StringVar(&c.name, "mirror", "", "mirror `NAME`")
	fs.StringVar(&c.source, "source-bootstrap", "", "source cluster `HOST:PORT[,HOST:PORT...]`")
	allTopics := fs.Bool("all-topics", false, "with --remove, --pause or --resume: every topic of the mirror")
	fs.BoolVar(&c.yes, "yes", false, "proceed without asking, also when records would be truncated")
	fs.BoolVar(&c.noValidate, "no-validate", false, "with --create: do not check first that the source answers as a Kafka cluster")
	fs.BoolVar(&c.force, "force", false, "with --failover: fail over even if the source is unreachable or the lag is not 0 in time")
	fs.BoolVar(&c.consistent, "consistent", false, "with --failover: fail every topic named over at one consistent cut (one source time, no transaction split, group offsets clamped to it)")
	fs.DurationVar(&c.timeout, "timeout", time.Minute, "with --failover: how long to wait for lag 0")
	fs.Var(&c.topics, "topic", "topic `NAME` or regular expression (repeatable)")
	c.registerAliases(fs, ops)
	fs.Var(&c.configs, "config", "mirror config `k=v` (repeatable)")
	fs.Var(&c.deleteConfigs, "delete-config", "with --alter: mirror config `k` to remove (repeatable)")
	if code, done := fs.ParseArgs(args, stdout, stderr); done {
		return code
	}
	if fs.NArg() > 0 {
		return cli.Exit(stderr, "mirrors", cli.UsageErrorf("unexpected arguments %q (every option is a flag: tandem mirrors --help)", fs.Args()))
	}
	if *allTopics {
		c.topics = cli.MultiFlag{".*"}
	}
	if err := c.readMirrorConfig(); err != nil {
		return cli.Exit(stderr, "mirrors", err)
	}
	var chosen []*mirrorsOp
	for _, op := range ops {
		if op.on {
			chosen = append(chosen, op)
		}
	}
	if len(chosen) == 2 && chosen[0].name == "create" && chosen[1].name == "add" {
		create, add := chosen[0], chosen[1]
		chosen = []*mirrorsOp{{name: "create --add", run: func(ctx context.Context) error {
			if err := create.run(ctx); err != nil {
				return err
			}
			return add.run(ctx)
		}, check: func() error { return errors.Join(create.check(), add.check()) }}}
	}
	if len(chosen) != 1 {
		fs.Usage()
		var names []string
		for _, op := range ops {
			names = append(names, "--"+op.name)
		}
		fmt.Fprintf(stderr, "tandem mirrors: choose one of %s (--create --add does both)\n", strings.Join(names, ", "))
		return 2
	}
	// Nothing is sent before the command line is known to be whole.
	if err := c.checkFlags(chosen[0]); err != nil {
		return cli.Exit(stderr, "mirrors", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute+c.timeout)
	defer cancel()
	cl, err := c.client.Connect(ctx, admin.Opt())
	if err != nil {
		return cli.Exit(stderr, "mirrors", err)
	}
	defer cl.Close()
	c.a = admin.New(cl)
	err = c.a.Supported(ctx)
	if err == nil {
		err = chosen[0].run(ctx)
	}
	if errors.Is(err, errUnhealthy) {
		return 1
	}
	return cli.Exit(stderr, "mirrors", err)
}

// checkFlags checks the command line of op: the flags that go with
// another operation only, the flags op needs, the connection's.
func (c *mirrorsCmd) checkFlags(op *mirrorsOp) error {
	switch {
	case c.consistent && op.name != "failover":
		return cli.UsageErrorf("--consistent goes with --failover")
	case len(c.exclude) > 0 && !strings.HasSuffix(op.name, "add"):
		return cli.UsageErrorf("--exclude goes with --add (--start)")
	case c.failedOnly && op.name != "describe":
		return cli.UsageErrorf("--failed goes with --describe")
	}
	if op.check != nil {
		if err := op.check(); err != nil {
			return err
		}
	}
	return c.client.Check()
}

// opChecks are the flags each operation needs, checked before anything
// is sent.
func (c *mirrorsCmd) opChecks() map[string]func() error {
	mirrorNamed := func() error { return need(flagReq{"--mirror", c.name != ""}) }
	return map[string]func() error{
		"create": func() error { _, err := c.mirrorConfigs(); return err },
		"add": func() error {
			if err := need(flagReq{"--mirror", c.name != ""}, flagReq{"--topic", len(c.topics) > 0}); err != nil {
				return err
			}
			_, _, err := c.splitAdd()
			return err
		},
		"remove":   func() error { return need(flagReq{"--mirror", c.name != ""}, flagReq{"--topic", len(c.topics) > 0}) },
		"failover": mirrorNamed,
		"failback": func() error {
			if _, err := c.mirrorConfigs(); err != nil {
				return err
			}
			_, err := c.topicFilter()
			return err
		},
		"pause":           mirrorNamed,
		"resume":          mirrorNamed,
		"delete":          mirrorNamed,
		"describe":        func() error { _, err := c.topicFilter(); return err },
		"describe-config": mirrorNamed,
		"alter": func() error {
			if err := need(flagReq{"--mirror", c.name != ""}, flagReq{"--config or --delete-config", len(c.configs)+len(c.deleteConfigs) > 0}); err != nil {
				return err
			}
			_, err := cli.KeyValues(c.configs)
			return err
		},
		"diverged": func() error {
			if err := mirrorNamed(); err != nil {
				return err
			}
			_, err := c.topicFilter()
			return err
		},
	}
}

// isTerminal reports whether f is a character device (a terminal, or
// /dev/null: with stdout a terminal as well, someone is there to ask).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// flagReq is a flag an operation needs, and whether it was given.
type flagReq struct {
	flag  string
	given bool
}

// need is a usage error naming the flags an operation is missing, and
// only those.
func need(reqs ...flagReq) error {
	var missing []string
	for _, r := range reqs {
		if !r.given {
			missing = append(missing, r.flag)
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return cli.UsageErrorf("%s is required", missing[0])
	}
	return cli.UsageErrorf("%s and %s are required", strings.Join(missing[:len(missing)-1], ", "), missing[len(missing)-1])
}

// mirrorConfigs are the configs of the mirror --mirror from
// --source-bootstrap that --config describes.
func (c *mirrorsCmd) mirrorConfigs() (map[string]string, error) {
	if err := need(flagReq{"--mirror", c.name != ""}, flagReq{"--source-bootstrap", c.source != ""}); err != nil {
		return nil, err
	}
	if _, err := kafkaclient.Seeds(c.source); err != nil {
		return nil, cli.UsageErrorf("--source-bootstrap %q: %v", c.source, err)
	}
	cfg, err := cli.KeyValues(c.configs)
	if err != nil {
		return nil, err
	}
	cfg["bootstrap.servers"] = c.source
	return cfg, nil
}

func (c *mirrorsCmd) create(ctx context.Context) error {
	cfg, err := c.mirrorConfigs()
	if err != nil {
		return err
	}
	if !c.noValidate {
		if err := probeSource(ctx, cfg); err != nil {
			return err
		}
	}
	if err := c.a.CreateMirror(ctx, c.name, cfg); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Created mirror %s.\n", c.name)
	return nil
}

// probeSource checks, from here and with the mirror's security configs,
// that the source answers ApiVersions. The broker accepts a source that
// is down (it may come back; the mirror shows FAILED meanwhile), so
// without this a mistyped address would only show later, as FAILED.
func probeSource(ctx context.Context, cfg map[string]string) error {
	opts, err := mirrorcfg.ClientOpts(cfg)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(opts, kgo.DialTimeout(5*time.Second))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// One bootstrap server answering is enough.
	var errs []string
	for _, b := range cl.SeedBrokers() {
		_, err := b.Request(ctx, kmsg.NewPtrApiVersionsRequest())
		if err == nil {
			return nil
		}
		errs = append(errs, cli.InWords(err.Error(), err))
	}
	return fmt.Errorf("source cluster %s does not answer as a Kafka cluster: %s (--no-validate creates the mirror anyway)", cfg["bootstrap.servers"], strings.Join(errs, "; "))
}

func (c *mirrorsCmd) add(ctx context.Context) error {
	if err := need(flagReq{"--mirror", c.name != ""}, flagReq{"--topic", len(c.topics) > 0}); err != nil {
		return err
	}
	names, patterns, err := c.splitAdd()
	if err != nil {
		return err
	}
	if len(names) > 0 {
		m := map[string]string{}
		for _, t := range names {
			m[t] = c.name
		}
		plan, err := c.a.PlanAddTopics(ctx, m)
		if err != nil {
			return err
		}
		if err := c.confirmTruncation(plan, "--add"); err != nil {
			return err
		}
		if err := c.a.AddTopicsToMirror(ctx, m); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "Added %d topic(s) to mirror %s: %v\n", len(names), c.name, names)
	}
	return c.savePatterns(ctx, patterns)
}

// confirmTruncation shows what adding topics removes from their logs here
// and goes on with --yes, or when the operator says so at a terminal.
func (c *mirrorsCmd) confirmTruncation(plan []mirrorproto.Truncation, op string) error {
	var total int64
	for _, t := range plan {
		total += t.Records()
	}
	if total == 0 {
		return nil
	}
	printTruncations(c.stdout, plan)
	fmt.Fprintf(c.stdout, "%s truncates %d record(s) here to converge with the source; each is first copied to <topic>.diverged (see --diverged).\n", op, total)
	if c.yes {
		return nil
	}
	if c.interactive {
		fmt.Fprint(c.stdout, "Proceed? [y/N] ")
		var answer string
		fmt.Fscanln(c.stdin, &answer) //nolint:errcheck // no answer is no
		if a := strings.ToLower(strings.TrimSpace(answer)); a == "y" || a == "yes" {
			return nil
		}
		return fmt.Errorf("%s: not confirmed; nothing changed", op)
	}
	return fmt.Errorf("%s would truncate %d record(s): run it again with --yes to proceed", op, total)
}

func printTruncations(w io.Writer, plan []mirrorproto.Truncation) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tLOG-END\tTRUNCATE-TO\tRECORDS\tSOURCE-LAST-MIRROR-EPOCH")
	for _, t := range plan {
		lme := fmt.Sprint(t.LastMirrorEpoch)
		if t.LastMirrorEpoch < 0 {
			lme = "none (never mirrored there: everything goes)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", t.Topic, t.Partition, t.LogEnd, t.TruncateTo, t.Records(), lme)
	}
	tw.Flush()
}

func (c *mirrorsCmd) remove(ctx context.Context) error {
	if err := need(flagReq{"--mirror", c.name != ""}, flagReq{"--topic", len(c.topics) > 0}); err != nil {
		return err
	}
	msg, err := c.a.RemoveTopicsFromMirror(ctx, c.name, c.topics)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, msg)
	return nil
}

func (c *mirrorsCmd) pauseResume(ctx context.Context, pause bool) error {
	if err := need(flagReq{"--mirror", c.name != ""}); err != nil {
		return err
	}
	var err error
	if pause {
		err = c.a.PauseMirror(ctx, c.name, c.topics...)
	} else {
		err = c.a.ResumeMirror(ctx, c.name, c.topics...)
	}
	if err != nil {
		return err
	}
	done, until := "Paused", "stop copying until --resume"
	if !pause {
		done, until = "Resumed", "copy from the source again"
	}
	what := "its topics"
	if len(c.topics) > 0 {
		what = "its topics matching " + strings.Join(c.topics, ", ")
	} else if ms, err := c.a.ListMirrors(ctx); err == nil {
		if i := slices.IndexFunc(ms, func(m mirrorproto.ListedMirror) bool { return m.MirrorName == c.name }); i >= 0 {
			what = fmt.Sprintf("its %d topic(s)", ms[i].TopicCount)
		}
	}
	fmt.Fprintf(c.stdout, "%s mirror %s: %s %s.\n", done, c.name, what, until)
	return nil
}

func (c *mirrorsCmd) deleteMirror(ctx context.Context) error {
	if err := need(flagReq{"--mirror", c.name != ""}); err != nil {
		return err
	}
	if err := c.a.DeleteMirror(ctx, c.name); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Deleted mirror %s; its topics are writable here.\n", c.name)
	return nil
}

func (c *mirrorsCmd) list(ctx context.Context) error {
	ms, err := c.a.ListMirrors(ctx)
	if err != nil {
		return err
	}
	if c.asJSON {
		out := []describedMirror{}
		for _, m := range ms {
			out = append(out, describedMirror{Mirror: m.MirrorName, SourceBootstrap: m.SourceBootstrap, TopicCount: m.TopicCount})
		}
		return json.NewEncoder(c.stdout).Encode(out)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MIRROR\tSOURCE\tTOPICS")
	for _, m := range ms {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", m.MirrorName, m.SourceBootstrap, m.TopicCount)
	}
	return tw.Flush()
}

// describedMirror is a mirror as --list --json and --describe --json print
// it (docs/mirroring.md, "--json"): --list fills the first three fields,
// --describe all. Unknown offsets and lags are null, never 0.
type describedMirror struct {
	Mirror          string               `json:"mirror"`
	SourceBootstrap string               `json:"source_bootstrap"`
	TopicCount      int32                `json:"topic_count"`
	State           string               `json:"state,omitzero"`
	Error           string               `json:"error,omitzero"`
	ACLSync         string               `json:"acl_sync,omitzero"`
	SourceReachable *bool                `json:"source_reachable,omitzero"`  // --describe: false while the source cannot be reached
	SourceClusterID string               `json:"source_cluster_id,omitzero"` // as the mirror recorded it
	TopicPrefix     string               `json:"topic_prefix,omitzero"`      // mirror.topic.prefix
	Partitions      []describedPartition `json:"partitions,omitzero"`
	Diverged        []divergedRange      `json:"diverged,omitzero"`
	unlisted        int                  // topics of the mirror without partitions here yet
}

type describedPartition struct {
	Topic             string     `json:"topic"`
	SourceTopic       string     `json:"source_topic,omitzero"` // the source's name, when not topic (mirror.topic.prefix)
	Partition         int32      `json:"partition"`
	State             string     `json:"state"`
	SourceOffset      *int64     `json:"source_offset"`
	SourceOffsetTime  *time.Time `json:"source_offset_time"`
	DestinationOffset *int64     `json:"destination_offset"`
	Lag               *int64     `json:"lag"`
	LagMs             *int64     `json:"lag_ms"`
	// RPOKnown: lag and lag_ms are what a failover now would give up;
	// false while unknown, or stale (lower bounds: the source's end
	// offset was not learned lately or the source cannot be asked).
	RPOKnown         bool   `json:"rpo_known"`
	Reason           string `json:"reason,omitzero"`
	DestinationIssue string `json:"destination_issue,omitzero"` // no leader here, an ISR below min.insync.replicas
	stale            bool   // the source offset is not the source's end now
}

func known(v int64) *int64 {
	if v < 0 {
		return nil
	}
	return &v
}

// topicFilter matches the --topic flags (anchored regular expressions;
// none matches every topic).
func (c *mirrorsCmd) topicFilter() (func(string) bool, error) {
	var res []*regexp.Regexp
	for _, t := range c.topics {
		re, err := regexp.Compile("^(?:" + t + ")$")
		if err != nil {
			return nil, cli.UsageErrorf("--topic %q: %v", t, err)
		}
		res = append(res, re)
	}
	return func(topic string) bool {
		return len(res) == 0 || slices.ContainsFunc(res, func(re *regexp.Regexp) bool { return re.MatchString(topic) })
	}, nil
}

// described fetches the mirrors --describe shows. A mirror named with
// --mirror that cannot be described (it does not exist, or may not be
// seen) is an error; one whose source fails is shown with its error.
func (c *mirrorsCmd) described(ctx context.Context) ([]describedMirror, error) {
	match, err := c.topicFilter()
	if err != nil {
		return nil, err
	}
	var names []string
	if c.name != "" {
		names = []string{c.name}
	}
	ms, err := c.a.DescribeMirrors(ctx, names...)
	if err != nil {
		return nil, err
	}
	listed, err := c.a.ListMirrors(ctx)
	if err != nil {
		return nil, err
	}
	var out []describedMirror
	matched := false
	for _, m := range ms {
		if m.ErrorCode != 0 && m.State == "" {
			return nil, admin.ErrorOf(m.ErrorCode, m.ErrorMessage)
		}
		reachable := m.ErrorCode != mirrorproto.ErrMirrorSourceUnavailable.Code
		dm := describedMirror{Mirror: m.MirrorName, State: m.State, ACLSync: m.ACLSync, SourceReachable: &reachable,
			SourceClusterID: m.SourceClusterID, TopicPrefix: m.TopicPrefix, Partitions: []describedPartition{}, Diverged: []divergedRange{}}
		if i := slices.IndexFunc(listed, func(l mirrorproto.ListedMirror) bool { return l.MirrorName == m.MirrorName }); i >= 0 {
			dm.SourceBootstrap, dm.TopicCount = listed[i].SourceBootstrap, listed[i].TopicCount
		}
		for _, d := range m.Diverged {
			if match(d.Topic) {
				dm.Diverged = append(dm.Diverged, divergedOf(d))
			}
		}
		if m.ErrorMessage != nil {
			dm.Error = *m.ErrorMessage
		}
		for _, t := range m.Topics {
			if !match(t.TopicName) {
				continue
			}
			matched = true
			if len(t.Partitions) == 0 {
				dm.unlisted++ // mirrored, not created here yet
			}
			for _, p := range t.Partitions {
				if c.failedOnly && p.State != "FAILED" {
					continue
				}
				dp := describedPartition{Topic: t.TopicName, SourceTopic: t.SourceTopicName, Partition: p.PartitionIndex, SourceOffset: known(p.SourceOffset),
					DestinationOffset: known(p.DestinationOffset), Lag: known(p.Lag), LagMs: known(p.LagMs), State: p.State, Reason: p.Reason,
					RPOKnown: p.Lag >= 0 && p.LagMs >= 0 && !p.SourceStale, DestinationIssue: p.DestinationIssue, stale: p.SourceStale}
				if p.SourceOffsetTime > 0 {
					at := time.UnixMilli(p.SourceOffsetTime).UTC()
					dp.SourceOffsetTime = &at
				}
				dm.Partitions = append(dm.Partitions, dp)
			}
		}
		out = append(out, dm)
	}
	if len(c.topics) > 0 && !matched {
		// A script waiting for lag 0 must not pass on a typo.
		where := "no mirror's topic"
		if c.name != "" {
			where = "no topic of mirror " + c.name
		}
		return nil, fmt.Errorf("%s matches --topic %s", where, strings.Join(c.topics, ", --topic "))
	}
	return out, nil
}

// unhealthy reports whether a mirror's source fails, or one of its
// partitions is FAILED, cannot be copied now, knows the source's end
// only as it was a while ago, or is not held safely here (no leader, an
// ISR below min.insync.replicas).
func (m describedMirror) unhealthy() bool {
	return m.State == "FAILED" || m.unlisted > 0 || slices.ContainsFunc(m.Partitions, func(p describedPartition) bool {
		return p.State == "FAILED" || p.Reason != "" && p.State != "STOPPED" || p.stale || p.DestinationIssue != ""
	})
}

func (c *mirrorsCmd) describe(ctx context.Context) error {
	ms, err := c.described(ctx)
	if err != nil {
		return err
	}
	unhealthy := slices.ContainsFunc(ms, describedMirror.unhealthy)
	if c.asJSON {
		if err := json.NewEncoder(c.stdout).Encode(ms); err != nil {
			return err
		}
	} else {
		if c.failedOnly && !slices.ContainsFunc(ms, func(m describedMirror) bool { return len(m.Partitions) > 0 }) {
			fmt.Fprintln(c.stdout, "No FAILED partitions.")
		}
		said := printDescribed(c.stdout, ms)
		for _, m := range ms {
			// A mirror failed over whole has no use for its source:
			// /healthz does not warn of it either (--json keeps it).
			if m.Error != "" && m.State != "STOPPED" && !said[m.Mirror+"\x00"+m.Error] {
				fmt.Fprintf(c.stderr, "mirror %s: %s: %s\n", m.Mirror, m.State, m.Error)
			}
			if m.ACLSync != "" {
				fmt.Fprintf(c.stderr, "mirror %s: ACL sync: %s\n", m.Mirror, m.ACLSync)
			}
			if m.unlisted > 0 {
				fmt.Fprintf(c.stderr, "mirror %s: %d topic(s) have no partitions here yet (being created)\n", m.Mirror, m.unlisted)
			}
		}
	}
	if unhealthy {
		return errUnhealthy
	}
	return nil
}

// sinceSuffix is the " (since T)" a reason ends with, "" if none.
func sinceSuffix(reason string) string {
	if i := strings.LastIndex(reason, " (since "); i >= 0 && strings.HasSuffix(reason, ")") {
		return reason[i:]
	}
	return ""
}

// printDescribed prints the KIP's table, then the lag in milliseconds,
// how old the source offset is, and why a partition cannot be copied;
// "-" is unknown. When a topic has another name on the source
// (mirror.topic.prefix), a SOURCE-TOPIC column follows TOPIC. A reason
// is said once per mirror, below the table, and its rows point to it
// ([1]): a source that cannot be reached is one reason, not the same
// 300 characters on every row. It returns the notes printed, so that
// the mirror's error is not said twice.
func printDescribed(w io.Writer, ms []describedMirror) map[string]bool {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	renamed := slices.ContainsFunc(ms, func(m describedMirror) bool {
		return slices.ContainsFunc(m.Partitions, func(p describedPartition) bool { return p.SourceTopic != "" })
	})
	topic := func(p describedPartition) string {
		if !renamed {
			return p.Topic
		}
		return p.Topic + "\t" + cmp.Or(p.SourceTopic, p.Topic)
	}
	if renamed {
		fmt.Fprintln(tw, "MIRROR\tTOPIC\tSOURCE-TOPIC\tPARTITION\tSOURCE-OFFSET\tDESTINATION-OFFSET\tLAG\tSTATE\tLAG-MS\tSOURCE-AGE\tREASON")
	} else {
		fmt.Fprintln(tw, "MIRROR\tTOPIC\tPARTITION\tSOURCE-OFFSET\tDESTINATION-OFFSET\tLAG\tSTATE\tLAG-MS\tSOURCE-AGE\tREASON")
	}
	opt := func(v *int64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprint(*v)
	}
	var notes []string // "mirror: reason", numbered from 1
	said := map[string]bool{}
	for _, m := range ms {
		for _, p := range m.Partitions {
			age := "-"
			if p.SourceOffsetTime != nil {
				age = time.Since(*p.SourceOffsetTime).Truncate(100 * time.Millisecond).String()
			}
			lag, lagMs := opt(p.Lag), opt(p.LagMs)
			if p.stale && p.Lag != nil {
				lag = ">=" + lag // a stale source end: at least this much
				if p.LagMs != nil {
					lagMs = ">=" + lagMs
				}
			}
			reason := p.Reason
			if p.DestinationIssue != "" {
				reason = strings.TrimPrefix(p.DestinationIssue+"; "+reason, "; ")
				reason = strings.TrimSuffix(reason, "; ")
			}
			if reason != "" {
				note := "mirror " + m.Mirror + ": " + reason
				i := slices.Index(notes, note)
				if i < 0 {
					i, notes = len(notes), append(notes, note)
					said[m.Mirror+"\x00"+strings.TrimSuffix(p.Reason, sinceSuffix(p.Reason))] = true
				}
				reason = fmt.Sprintf("[%d]", i+1)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Mirror, topic(p), p.Partition, opt(p.SourceOffset),
				opt(p.DestinationOffset), lag, p.State, lagMs, age, reason)
		}
	}
	tw.Flush()
	for i, n := range notes {
		fmt.Fprintf(w, "[%d] %s\n", i+1, n)
	}
	return said
}

func (c *mirrorsCmd) describeConfig(ctx context.Context) error {
	if err := need(flagReq{"--mirror", c.name != ""}); err != nil {
		return err
	}
	cfgs, err := c.a.DescribeMirrorConfigs(ctx, c.name)
	if err != nil {
		return err
	}
	if c.asJSON {
		type config struct {
			Name      string  `json:"name"`
			Value     *string `json:"value"` // null when sensitive
			Sensitive bool    `json:"sensitive"`
		}
		out := []config{}
		for _, cf := range cfgs {
			out = append(out, config{Name: cf.Name, Value: cf.Value, Sensitive: cf.Sensitive})
		}
		return json.NewEncoder(c.stdout).Encode(out)
	}
	for _, cf := range cfgs {
		v := "(sensitive)"
		if cf.Value != nil {
			v = *cf.Value
		}
		fmt.Fprintf(c.stdout, "%s=%s\n", cf.Name, v)
	}
	return nil
}

func (c *mirrorsCmd) alter(ctx context.Context) error {
	if err := need(flagReq{"--mirror", c.name != ""}, flagReq{"--config or --delete-config", len(c.configs)+len(c.deleteConfigs) > 0}); err != nil {
		return err
	}
	set, err := cli.KeyValues(c.configs)
	if err != nil {
		return err
	}
	if err := c.a.AlterMirrorConfigs(ctx, c.name, set, c.deleteConfigs); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Altered the configs of mirror %s.\n", c.name)
	return nil
}
