package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tandem-kafka/tandem/cmd/tandem/internal/cli"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

const groupsDoc = `Lists, describes (members, committed offsets, lag), resets the offsets of
and deletes groups: classic and KIP-848 consumer groups, and share groups
(KIP-932) with their start offsets, on any Kafka-compatible cluster (as
kafka-consumer-groups.sh and kafka-share-groups.sh do).

Usage: tandem groups <command> [GROUP...] [flags]
`

func groups(args []string, stdout, stderr io.Writer) int {
	return cli.RunVerbs("groups", groupsDoc, []cli.Verb{
		{Name: "list", Summary: "list groups with their type and state", Run: groupsList},
		{Name: "describe", Summary: "members, assignment, committed offset, end offset and lag per partition", Run: groupsDescribe},
		{Name: "reset-offsets", Summary: "move a group's offsets (a dry run unless --execute; refused while it has members)", Run: groupsResetOffsets},
		{Name: "delete", Summary: "delete groups and their committed offsets", Run: groupsDelete},
	}, args, stdout, stderr)
}

// listedGroup is a group as `groups list --json` prints it.
type listedGroup struct {
	Group        string `json:"group"`
	Type         string `json:"type"` // classic, consumer or share
	State        string `json:"state"`
	ProtocolType string `json:"protocol_type"` // "consumer" for consumers of the classic protocol, "" for others
	Coordinator  int32  `json:"coordinator"`
}

// groupType is the group's type, from what ListGroups said: its
// GroupType, else (an older broker) classic.
func groupType(l kadm.ListedGroup) string {
	if l.GroupType != "" {
		return strings.ToLower(l.GroupType)
	}
	return "classic"
}

const groupsListDoc = `Lists the groups: consumer groups of either protocol and share groups.

Usage: tandem groups list [--type classic|consumer|share] [--json]
`

func groupsList(args []string, stdout, stderr io.Writer) int {
	c := cli.NewAdminCmd("groups list", groupsListDoc, true)
	typ := c.String("type", "", "only groups of this `TYPE`: classic, consumer or share")
	check := func() error {
		if err := c.NoArgs(); err != nil {
			return err
		}
		switch *typ {
		case "", "classic", "consumer", "share":
			return nil
		}
		return cli.UsageErrorf("--type %q: want classic, consumer or share", *typ)
	}
	return c.Run(args, stdout, stderr, adminTimeout, check, func(ctx context.Context, _ *kgo.Client, adm *kadm.Client) error {
		listed, err := adm.ListGroups(ctx)
		if err != nil {
			return fmt.Errorf("listing groups: %w", err)
		}
		out := []listedGroup{}
		for _, g := range slices.Sorted(maps.Keys(listed)) {
			l := listed[g]
			if *typ == "" || groupType(l) == *typ {
				out = append(out, listedGroup{Group: g, Type: groupType(l), State: l.State, ProtocolType: l.ProtocolType, Coordinator: l.Coordinator})
			}
		}
		if c.AsJSON {
			return cli.PrintJSON(stdout, out)
		}
		t := cli.NewTable(stdout, "GROUP", "TYPE", "STATE", "COORDINATOR")
		for _, g := range out {
			t.Row(g.Group, g.Type, g.State, g.Coordinator)
		}
		return t.Flush()
	})
}

// describedGroup is a group as `groups describe --json` prints it.
// Offsets and lags the cluster did not give are null, never 0.
type describedGroup struct {
	Group       string           `json:"group"`
	Type        string           `json:"type"`
	State       string           `json:"state"`
	Assignor    string           `json:"assignor"`
	Coordinator int32            `json:"coordinator"`
	Members     []groupMember    `json:"members"`
	Partitions  []groupPartition `json:"partitions"`
	TotalLag    *int64           `json:"total_lag"` // null when a partition's lag is unknown
}

type groupMember struct {
	MemberID   string            `json:"member_id"`
	InstanceID *string           `json:"instance_id"`
	ClientID   string            `json:"client_id"`
	Host       string            `json:"host"`
	Assignment []topicPartitions `json:"assignment"`
}

type topicPartitions struct {
	Topic      string  `json:"topic"`
	Partitions []int32 `json:"partitions"`
}

type groupPartition struct {
	Topic           string  `json:"topic"`
	Partition       int32   `json:"partition"`
	CommittedOffset *int64  `json:"committed_offset"` // a consumer group's; null for none (or a share group)
	StartOffset     *int64  `json:"start_offset"`     // a share group's share-partition start offset; null otherwise
	LogEndOffset    *int64  `json:"log_end_offset"`
	Lag             *int64  `json:"lag"`
	MemberID        *string `json:"member_id"` // the member it is assigned to; null for none
}

// assignmentOf turns a set of partitions into topicPartitions, sorted.
func assignmentOf(s kadm.TopicsSet) []topicPartitions {
	out := []topicPartitions{}
	for _, tp := range s.Sorted() {
		out = append(out, topicPartitions{Topic: tp.Topic, Partitions: tp.Partitions})
	}
	return out
}

func known64(v int64) *int64 {
	if v < 0 {
		return nil
	}
	return &v
}

// describeGroup reads one group: its members and, per partition it has
// an offset for or a member is assigned, where it is and how far behind.
func describeGroup(ctx context.Context, adm *kadm.Client, name string, listed kadm.ListedGroups) (describedGroup, error) {
	l, ok := listed[name]
	if !ok {
		return describedGroup{}, fmt.Errorf("group %s: %w", name, kerr.GroupIDNotFound)
	}
	r := &groupReading{
		adm: adm, name: name,
		d:          describedGroup{Group: name, Type: groupType(l), State: l.State, Coordinator: l.Coordinator, Members: []groupMember{}, Partitions: []groupPartition{}},
		assigned:   map[string]map[int32]string{},
		partitions: kadm.TopicsSet{},
		committed:  map[string]map[int32]int64{},
	}
	var err error
	switch r.d.Type {
	case "share":
		err = r.shareMembers(ctx)
	case "consumer":
		err = r.consumerMembers(ctx)
	default:
		err = r.classicMembers(ctx)
	}
	if err == nil && r.d.Type != "share" {
		err = r.committedOffsets(ctx)
	}
	if err != nil {
		return r.d, err
	}
	for t, ps := range r.assigned {
		for p := range ps {
			r.partitions.Add(t, p)
		}
	}
	var ends kadm.ListedOffsets
	if topics := r.partitions.Topics(); len(topics) > 0 {
		ends, _ = adm.ListEndOffsets(ctx, topics...)
	}
	r.lags(ends)
	return r.d, nil
}

// groupReading is a group being described (describeGroup): what its steps
// fill in.
type groupReading struct {
	adm          *kadm.Client
	name         string
	d            describedGroup
	assigned     map[string]map[int32]string // topic → partition → member
	partitions   kadm.TopicsSet              // every partition to list
	committed    map[string]map[int32]int64  // a consumer or classic group's offsets
	shareOffsets kadm.ShareOffsets           // a share group's
}

// assign records member m's assignment s.
func (r *groupReading) assign(m *groupMember, s kadm.TopicsSet) {
	m.Assignment = assignmentOf(s)
	s.Each(func(t string, p int32) {
		if r.assigned[t] == nil {
			r.assigned[t] = map[int32]string{}
		}
		r.assigned[t][p] = m.MemberID
	})
}

// shareMembers reads a share group: its state, members and start offsets.
func (r *groupReading) shareMembers(ctx context.Context) error {
	name, d := r.name, &r.d
	gs, err := r.adm.DescribeShareGroups(ctx, name)
	if err != nil {
		return fmt.Errorf("group %s: %w", name, err)
	}
	g := gs[name]
	if g.Err != nil {
		return fmt.Errorf("group %s: %w", name, g.Err)
	}
	d.State, d.Assignor, d.Coordinator = g.GroupState, g.Assignor, g.Coordinator.NodeID
	for _, m := range g.Members {
		gm := groupMember{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost}
		r.assign(&gm, m.Assignment)
		d.Members = append(d.Members, gm)
	}
	os, err := r.adm.DescribeShareGroupOffsets(ctx, name)
	if err != nil {
		return fmt.Errorf("group %s: reading its start offsets: %w", name, err)
	}
	if err := os[name].Err; err != nil {
		return fmt.Errorf("group %s: reading its start offsets: %w", name, err)
	}
	r.shareOffsets = os[name].Offsets
	for t, ps := range r.shareOffsets {
		for p := range ps {
			r.partitions.Add(t, p)
		}
	}
	return nil
}

// consumerMembers reads a consumer group's (KIP-848) state and members.
func (r *groupReading) consumerMembers(ctx context.Context) error {
	name, d := r.name, &r.d
	gs, err := r.adm.DescribeConsumerGroups(ctx, name)
	if err != nil {
		return fmt.Errorf("group %s: %w", name, err)
	}
	g := gs[name]
	if g.Err != nil {
		return fmt.Errorf("group %s: %w", name, g.Err)
	}
	d.State, d.Assignor, d.Coordinator = g.State, g.AssignorName, g.Coordinator.NodeID
	for _, m := range g.Members {
		gm := groupMember{MemberID: m.MemberID, InstanceID: m.InstanceID, ClientID: m.ClientID, Host: m.ClientHost}
		r.assign(&gm, m.Assignment)
		d.Members = append(d.Members, gm)
	}
	return nil
}

// classicMembers reads a classic group's state and members.
func (r *groupReading) classicMembers(ctx context.Context) error {
	name, d := r.name, &r.d
	gs, err := r.adm.DescribeGroups(ctx, name)
	if err != nil {
		return fmt.Errorf("group %s: %w", name, err)
	}
	g := gs[name]
	if g.Err != nil {
		return fmt.Errorf("group %s: %w", name, cli.KafkaError(g.Err, g.ErrMessage))
	}
	d.State, d.Assignor, d.Coordinator = g.State, g.Protocol, g.Coordinator.NodeID
	for _, m := range g.Members {
		gm := groupMember{MemberID: m.MemberID, InstanceID: m.InstanceID, ClientID: m.ClientID, Host: m.ClientHost}
		s := kadm.TopicsSet{}
		if ca, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range ca.Topics {
				s.Add(t.Topic, t.Partitions...)
			}
		}
		r.assign(&gm, s)
		d.Members = append(d.Members, gm)
	}
	return nil
}

// committedOffsets reads a consumer or classic group's committed offsets.
func (r *groupReading) committedOffsets(ctx context.Context) error {
	offsets, err := r.adm.FetchOffsets(ctx, r.name)
	if err != nil {
		return fmt.Errorf("group %s: reading its committed offsets: %w", r.name, err)
	}
	if err := offsets.Error(); err != nil {
		return fmt.Errorf("group %s: reading its committed offsets: %w", r.name, err)
	}
	offsets.Each(func(o kadm.OffsetResponse) {
		if r.committed[o.Topic] == nil {
			r.committed[o.Topic] = map[int32]int64{}
		}
		r.committed[o.Topic][o.Partition] = o.At
		r.partitions.Add(o.Topic, o.Partition)
	})
	return nil
}

// lags lists every partition with its member, offsets and lag against
// the log end offsets ends, and the group's total lag when every
// partition's is known.
func (r *groupReading) lags(ends kadm.ListedOffsets) {
	d := &r.d
	var total int64
	allKnown := true
	for _, tp := range r.partitions.Sorted() {
		for _, p := range tp.Partitions {
			gp := groupPartition{Topic: tp.Topic, Partition: p}
			if m, ok := r.assigned[tp.Topic][p]; ok {
				gp.MemberID = &m
			}
			if e, ok := ends.Lookup(tp.Topic, p); ok && e.Err == nil {
				gp.LogEndOffset = known64(e.Offset)
			}
			if d.Type == "share" {
				if so, ok := r.shareOffsets.Lookup(tp.Topic, p); ok && so.Err == nil {
					gp.StartOffset, gp.Lag = known64(so.StartOffset), known64(so.Lag)
				}
			} else if at, ok := r.committed[tp.Topic][p]; ok {
				gp.CommittedOffset = known64(at)
				if gp.CommittedOffset != nil && gp.LogEndOffset != nil {
					gp.Lag = known64(max(0, *gp.LogEndOffset-*gp.CommittedOffset))
				}
			}
			if gp.Lag == nil {
				allKnown = false
			} else {
				total += *gp.Lag
			}
			d.Partitions = append(d.Partitions, gp)
		}
	}
	if allKnown {
		d.TotalLag = &total
	}
}

const groupsDescribeDoc = `Describes groups (every group when none is named): state, members and
their assignment, and per partition the committed offset (a share group:
its start offset), the log end offset and the lag. A lag the cluster
cannot give (no committed offset, no end offset known) is "-" (null in
JSON), never 0.

Usage: tandem groups describe [GROUP...] [--json]
`

func groupsDescribe(args []string, stdout, stderr io.Writer) int {
	c := cli.NewAdminCmd("groups describe", groupsDescribeDoc, true)
	check := func() error { return nil }
	return c.Run(args, stdout, stderr, adminTimeout, check, func(ctx context.Context, _ *kgo.Client, adm *kadm.Client) error {
		listed, err := adm.ListGroups(ctx)
		if err != nil {
			return fmt.Errorf("listing groups: %w", err)
		}
		names := c.Args()
		if len(names) == 0 {
			names = slices.Sorted(maps.Keys(listed))
		}
		out := []describedGroup{}
		var errs []string
		for _, g := range names {
			d, err := describeGroup(ctx, adm, g, listed)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			out = append(out, d)
		}
		if c.AsJSON {
			if err := cli.PrintJSON(stdout, out); err != nil {
				return err
			}
		} else {
			printGroups(stdout, out)
		}
		if len(errs) > 0 {
			return errors.New(strings.Join(errs, "; "))
		}
		return nil
	})
}

func printGroups(w io.Writer, gs []describedGroup) {
	for i, g := range gs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		lag := "unknown (a partition has no known lag)"
		if g.TotalLag != nil {
			lag = fmt.Sprint(*g.TotalLag)
		}
		fmt.Fprintf(w, "Group: %s  Type: %s  State: %s  Assignor: %s  Coordinator: %d  Members: %d  Total lag: %s\n",
			g.Group, g.Type, g.State, cli.CmpOr(g.Assignor, "-"), g.Coordinator, len(g.Members), lag)
		if len(g.Members) > 0 {
			t := cli.NewTable(w, "MEMBER-ID", "CLIENT-ID", "HOST", "ASSIGNMENT")
			for _, m := range g.Members {
				var as []string
				for _, a := range m.Assignment {
					as = append(as, a.Topic+":"+ids(a.Partitions))
				}
				t.Row(m.MemberID, m.ClientID, m.Host, cli.CmpOr(strings.Join(as, " "), "-"))
			}
			t.Flush()
		}
		offset := "CURRENT-OFFSET"
		if g.Type == "share" {
			offset = "START-OFFSET"
		}
		t := cli.NewTable(w, "TOPIC", "PARTITION", offset, "LOG-END-OFFSET", "LAG", "MEMBER-ID")
		for _, p := range g.Partitions {
			at := p.CommittedOffset
			if g.Type == "share" {
				at = p.StartOffset
			}
			t.Row(p.Topic, p.Partition, cli.OrDash(at), cli.OrDash(p.LogEndOffset), cli.OrDash(p.Lag), strOrDash(p.MemberID))
		}
		t.Flush()
	}
}

const groupsResetOffsetsDoc = `Moves a group's offsets (a consumer group's committed offsets, a share
group's start offsets), as kafka-consumer-groups.sh --reset-offsets does.
Without --execute it is a dry run: it prints the plan and changes
nothing. It is refused while the group has members: stop its consumers
first. A new offset outside the log is moved to its start or end.

Usage: tandem groups reset-offsets GROUP (--topic T[:P,P...] ... | --all-topics)
         (--to-earliest | --to-latest | --to-offset N | --to-datetime T | --shift-by N) [--execute] [--json]

--all-topics is every partition the group has an offset for. --to-datetime
takes RFC 3339 (2026-12-01T04:00:00Z), or Kafka's 2026-12-01T04:00:00.000
in local time: the earliest offset at or after it.
`

// offsetReset is one partition of a reset, as reset-offsets --json
// prints it.
type offsetReset struct {
	Group         string `json:"group"`
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	CurrentOffset *int64 `json:"current_offset"` // null: none committed
	NewOffset     int64  `json:"new_offset"`
}

func groupsResetOffsets(args []string, stdout, stderr io.Writer) int {
	c := cli.NewAdminCmd("groups reset-offsets", groupsResetOffsetsDoc, true)
	var topicFlags cli.MultiFlag
	c.Var(&topicFlags, "topic", "`TOPIC` or TOPIC:P,P,... to reset (repeatable)")
	allTopics := c.Bool("all-topics", false, "every partition the group has an offset for")
	earliest := c.Bool("to-earliest", false, "to the log start offset")
	latest := c.Bool("to-latest", false, "to the log end offset")
	toOffset := c.String("to-offset", "", "to offset `N`")
	toDatetime := c.String("to-datetime", "", "to the first offset at or after `TIME`")
	shiftBy := c.String("shift-by", "", "by `N` from the current offset (negative: back)")
	execute := c.Bool("execute", false, "do it (without: a dry run)")
	var (
		selected map[string][]int32 // topic → partitions; nil partitions: all
		how      resetHow
	)
	check := func() error {
		if c.NArg() != 1 {
			return cli.UsageErrorf("name one group: tandem groups reset-offsets GROUP ...")
		}
		if (len(topicFlags) > 0) == *allTopics {
			return cli.UsageErrorf("choose --topic T (repeatable) or --all-topics")
		}
		var err error
		if selected, err = resetSelection(topicFlags); err != nil {
			return err
		}
		how, err = resetWay(*earliest, *latest, *toOffset, *toDatetime, *shiftBy)
		return err
	}
	return c.Run(args, stdout, stderr, adminTimeout, check, func(ctx context.Context, _ *kgo.Client, adm *kadm.Client) error {
		group := c.Arg(0)
		listed, err := adm.ListGroups(ctx)
		if err != nil {
			return fmt.Errorf("listing groups: %w", err)
		}
		d, err := describeGroup(ctx, adm, group, listed)
		switch {
		case errors.Is(err, kerr.GroupIDNotFound) && len(selected) > 0:
			// A group that does not exist yet gets its offsets (as Kafka's tool does).
			d = describedGroup{Group: group, Type: "classic"}
		case err != nil:
			return err
		}
		if len(d.Members) > 0 {
			return fmt.Errorf("group %s has %d member(s) (state %s): offsets can only be reset while it has none; stop its consumers first", group, len(d.Members), d.State)
		}
		current := groupOffsetsNow(d)
		parts, err := resetPartitions(ctx, adm, *allTopics, selected, current)
		if err != nil {
			return err
		}
		if len(parts) == 0 {
			return fmt.Errorf("group %s has no offsets to reset", group)
		}
		plan, offsets, err := planReset(ctx, adm, group, parts, current, how)
		if err != nil {
			return err
		}
		if *execute {
			if err := commitReset(ctx, adm, d.Type, group, offsets); err != nil {
				return err
			}
		}
		if c.AsJSON {
			return cli.PrintJSON(stdout, plan)
		}
		printReset(stdout, group, plan, *execute)
		return nil
	})
}

// resetSelection is the partitions reset-offsets' --topic flags name:
// topic → partitions, nil partitions for all of them.
func resetSelection(topicFlags cli.MultiFlag) (map[string][]int32, error) {
	selected := map[string][]int32{}
	for _, tf := range topicFlags {
		t, ps, hasPs := strings.Cut(tf, ":")
		if t == "" {
			return nil, cli.UsageErrorf("--topic %q: want TOPIC or TOPIC:P,P", tf)
		}
		selected[t] = nil
		if hasPs {
			for _, p := range strings.Split(ps, ",") {
				v, err := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
				if err != nil || v < 0 {
					return nil, cli.UsageErrorf("--topic %q: %q is not a partition number", tf, p)
				}
				selected[t] = append(selected[t], int32(v))
			}
		}
	}
	return selected, nil
}

// resetHow is how reset-offsets moves each partition: how is the flag
// chosen (--to-earliest, --to-latest, --to-offset, --to-datetime or
// --shift-by), n the offset or shift and at the time it takes.
type resetHow struct {
	how string
	n   int64
	at  time.Time
}

// resetWay checks that exactly one way of moving the offsets is chosen
// and parses its argument.
func resetWay(earliest, latest bool, toOffset, toDatetime, shiftBy string) (resetHow, error) {
	var ways []string
	for name, on := range map[string]bool{"--to-earliest": earliest, "--to-latest": latest, "--to-offset": toOffset != "",
		"--to-datetime": toDatetime != "", "--shift-by": shiftBy != ""} {
		if on {
			ways = append(ways, name)
		}
	}
	if len(ways) != 1 {
		return resetHow{}, cli.UsageErrorf("choose one of --to-earliest, --to-latest, --to-offset N, --to-datetime T, --shift-by N")
	}
	h := resetHow{how: ways[0]}
	var err error
	switch h.how {
	case "--to-offset":
		if h.n, err = strconv.ParseInt(toOffset, 10, 64); err != nil || h.n < 0 {
			return h, cli.UsageErrorf("--to-offset %q: want an offset, 0 or more", toOffset)
		}
	case "--shift-by":
		if h.n, err = strconv.ParseInt(shiftBy, 10, 64); err != nil {
			return h, cli.UsageErrorf("--shift-by %q: want a whole number", shiftBy)
		}
	case "--to-datetime":
		if h.at, err = parseDatetime(toDatetime); err != nil {
			return h, err
		}
	}
	return h, nil
}

// groupOffsetsNow is a described group's offset of each partition
// (topic → partition → offset, nil where none is committed): its
// committed offsets, or a share group's start offsets.
func groupOffsetsNow(d describedGroup) map[string]map[int32]*int64 {
	current := map[string]map[int32]*int64{}
	for _, p := range d.Partitions {
		if current[p.Topic] == nil {
			current[p.Topic] = map[int32]*int64{}
		}
		current[p.Topic][p.Partition] = p.CommittedOffset
		if d.Type == "share" {
			current[p.Topic][p.Partition] = p.StartOffset
		}
	}
	return current
}

// resetPartitions is the partitions to move: every one the group has an
// offset for (all), or those selected, checked against the cluster's
// metadata.
func resetPartitions(ctx context.Context, adm *kadm.Client, all bool, selected map[string][]int32, current map[string]map[int32]*int64) (kadm.TopicsSet, error) {
	parts := kadm.TopicsSet{}
	if all {
		for t, ps := range current {
			for p := range ps {
				parts.Add(t, p)
			}
		}
		return parts, nil
	}
	details, err := adm.ListTopics(ctx, slices.Collect(maps.Keys(selected))...)
	if err != nil {
		return nil, fmt.Errorf("reading the metadata: %w", err)
	}
	for t, ps := range selected {
		dt, ok := details[t]
		if !ok || dt.Err != nil {
			return nil, fmt.Errorf("topic %s: %w", t, orErr(dt.Err, kerr.UnknownTopicOrPartition))
		}
		if ps == nil {
			for p := range dt.Partitions {
				parts.Add(t, p)
			}
		}
		for _, p := range ps {
			if _, ok := dt.Partitions[p]; !ok {
				return nil, fmt.Errorf("topic %s has no partition %d (it has %d)", t, p, len(dt.Partitions))
			}
			parts.Add(t, p)
		}
	}
	return parts, nil
}

// planReset is each partition's new offset, as printed and as committed:
// where how puts it, moved into the log if it falls outside.
func planReset(ctx context.Context, adm *kadm.Client, group string, parts kadm.TopicsSet, current map[string]map[int32]*int64, how resetHow) ([]offsetReset, kadm.Offsets, error) {
	topics := parts.Topics()
	starts, ends, after, err := resetBounds(ctx, adm, topics, how)
	if err != nil {
		return nil, nil, err
	}
	var plan []offsetReset
	offsets := kadm.Offsets{}
	for _, tp := range parts.Sorted() {
		for _, p := range tp.Partitions {
			start, _ := starts.Lookup(tp.Topic, p)
			end, _ := ends.Lookup(tp.Topic, p)
			cur := current[tp.Topic][p]
			var to int64
			switch how.how {
			case "--to-earliest":
				to = start.Offset
			case "--to-latest":
				to = end.Offset
			case "--to-offset":
				to = how.n
			case "--to-datetime":
				to = end.Offset
				if o, ok := after.Lookup(tp.Topic, p); ok && o.Offset >= 0 {
					to = o.Offset
				}
			case "--shift-by":
				if cur == nil {
					return nil, nil, fmt.Errorf("%s/%d: the group has no offset there to shift; use --to-offset, --to-earliest or --to-latest", tp.Topic, p)
				}
				to = *cur + how.n
			}
			to = max(start.Offset, min(end.Offset, to))
			plan = append(plan, offsetReset{Group: group, Topic: tp.Topic, Partition: p, CurrentOffset: cur, NewOffset: to})
			offsets.Add(kadm.Offset{Topic: tp.Topic, Partition: p, At: to, LeaderEpoch: -1})
		}
	}
	return plan, offsets, nil
}

// resetBounds reads the topics' log start and end offsets and, for
// --to-datetime, the first offsets at or after its time.
func resetBounds(ctx context.Context, adm *kadm.Client, topics []string, how resetHow) (starts, ends, after kadm.ListedOffsets, err error) {
	starts, err = adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading the log start offsets: %w", err)
	}
	ends, err = adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading the log end offsets: %w", err)
	}
	if how.how == "--to-datetime" {
		if after, err = adm.ListOffsetsAfterMilli(ctx, how.at.UnixMilli(), topics...); err == nil {
			err = after.Error()
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("finding the offsets at %s: %w", how.at.Format(time.RFC3339), err)
		}
	}
	return starts, ends, after, nil
}

// printReset prints a reset's plan as a table and what became of it.
func printReset(stdout io.Writer, group string, plan []offsetReset, executed bool) {
	t := cli.NewTable(stdout, "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET")
	for _, r := range plan {
		t.Row(r.Group, r.Topic, r.Partition, cli.OrDash(r.CurrentOffset), r.NewOffset)
	}
	t.Flush()
	if executed {
		fmt.Fprintf(stdout, "Reset the offsets of group %s: %d partition(s).\n", group, len(plan))
	} else {
		fmt.Fprintln(stdout, "Dry run: nothing changed. --execute commits these offsets.")
	}
}

func orErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// commitReset writes the new offsets: committed offsets for a consumer
// group, start offsets for a share group.
func commitReset(ctx context.Context, adm *kadm.Client, typ, group string, offsets kadm.Offsets) error {
	if typ == "share" {
		resps, err := adm.AlterShareGroupOffsets(ctx, group, offsets)
		if err == nil {
			err = resps.Error()
		}
		if err != nil {
			return fmt.Errorf("group %s: altering its start offsets: %w", group, err)
		}
		return nil
	}
	resps, err := adm.CommitOffsets(ctx, group, offsets)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		return fmt.Errorf("group %s: committing its offsets: %w", group, err)
	}
	return nil
}

// parseDatetime reads --to-datetime: RFC 3339, or Kafka's
// yyyy-MM-ddTHH:mm:ss[.SSS] in local time.
func parseDatetime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05.000", "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, cli.UsageErrorf("--to-datetime %q: want RFC 3339 (2026-12-01T04:00:00Z) or 2026-12-01T04:00:00.000 (local time)", s)
}

const groupsDeleteDoc = `Deletes groups and their committed offsets. A group with members is
refused (NON_EMPTY_GROUP).

Usage: tandem groups delete GROUP...
`

func groupsDelete(args []string, stdout, stderr io.Writer) int {
	c := cli.NewAdminCmd("groups delete", groupsDeleteDoc, false)
	check := func() error {
		if c.NArg() == 0 {
			return cli.UsageErrorf("name the group(s): tandem groups delete GROUP...")
		}
		return nil
	}
	return c.Run(args, stdout, stderr, adminTimeout, check, func(ctx context.Context, _ *kgo.Client, adm *kadm.Client) error {
		resps, err := adm.DeleteGroups(ctx, c.Args()...)
		if err != nil {
			return fmt.Errorf("deleting groups: %w", err)
		}
		var errs []string
		for _, g := range c.Args() {
			r, ok := resps[g]
			switch {
			case !ok:
				errs = append(errs, fmt.Sprintf("group %s: no answer for it", g))
			case r.Err != nil:
				errs = append(errs, fmt.Sprintf("group %s: %v", g, cli.KafkaError(r.Err, r.ErrMessage)))
			default:
				fmt.Fprintf(stdout, "Deleted group %s.\n", g)
			}
		}
		if len(errs) > 0 {
			return errors.New(strings.Join(errs, "; "))
		}
		return nil
	})
}
