package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestCommandsAgainstKfake runs the everyday commands against another
// Kafka-compatible broker, franz-go's kfake (three brokers in process),
// and reads back with kadm what each changed: they speak Kafka, not
// Tandem. The mirror commands are Tandem's own and are not tried here.
func TestCommandsAgainstKfake(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	bs := []string{"--bootstrap-server", strings.Join(addrs, ",")}
	adm := adminOf(t, addrs[0])
	ctx := ctxT(t)
	cmd := func(in string, args ...string) string { return ok(t, in, append(args, bs...)...) }

	// topics: create with partitions and a config, list, describe,
	// add-partitions, alter-config.
	cmd("", "topics", "create", "orders", "--partitions", "6", "--config", "retention.ms=3600000")
	d, err := adm.ListTopics(ctx, "orders")
	if err != nil || len(d["orders"].Partitions) != 6 {
		t.Fatalf("orders after create: %v %+v", err, d)
	}
	var listed []map[string]any
	unmarshal(t, cmd("", "topics", "list", "--json"), &listed)
	if len(listed) != 1 || listed[0]["topic"] != "orders" || listed[0]["partitions"] != 6.0 || listed[0]["topic_id"] != topicID(d["orders"].ID) {
		t.Fatalf("topics list --json: %v", listed)
	}
	cmd("", "topics", "add-partitions", "orders", "--partitions", "8")
	waitFor(t, "orders with 8 partitions", func() bool {
		d, _ := adminOf(t, addrs[0]).ListTopics(ctx, "orders")
		return len(d["orders"].Partitions) == 8
	})
	cmd("", "topics", "alter-config", "orders", "--config", "retention.ms=60000")
	cfgs, err := adm.DescribeTopicConfigs(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(cfgs[0].Configs, func(c kadm.Config) bool { return c.Key == "retention.ms" }); i < 0 || cfgs[0].Configs[i].MaybeValue() != "60000" {
		t.Fatalf("retention.ms after alter-config: %+v", cfgs[0].Configs)
	}

	// produce, then consume as a group: the group's committed offsets
	// are the ends, and groups describe shows lag 0, then 2.
	var lines []string
	for i := range 12 {
		lines = append(lines, fmt.Sprintf("k%d:v%d", i, i))
	}
	cmd(strings.Join(lines, "\n")+"\n", "produce", "orders", "--key-separator", ":")
	adm = adminOf(t, addrs[0]) // a fresh client: kadm caches metadata, and orders has grown
	ends, err := adm.ListEndOffsets(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	want := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		total += o.Offset
		want[fmt.Sprintf("orders/%d", o.Partition)] = o.Offset
	})
	if total != 12 {
		t.Fatalf("kfake holds %d records after producing 12", total)
	}
	out := cmd("", "consume", "orders", "--group", "g1", "--from-beginning", "-e", "--print-key")
	if n := strings.Count(out, "\n"); n != 12 {
		t.Fatalf("consume -e read %d records of 12:\n%s", n, out)
	}
	got := committed(t, adm, "g1")
	if len(got) == 0 || !mapsSubset(got, want) {
		t.Fatalf("g1 committed %v, want the ends %v", got, want)
	}
	// Two more records on a partition the group committed on.
	var p string
	for k := range got {
		p = strings.TrimPrefix(k, "orders/")
	}
	cmd("x\ny\n", "produce", "orders", "--partition", p)
	var gs []describedGroup
	unmarshal(t, cmd("", "groups", "describe", "g1", "--json"), &gs)
	if len(gs) != 1 || gs[0].TotalLag == nil || *gs[0].TotalLag != 2 {
		t.Fatalf("groups describe g1 after two more records: %+v", gs)
	}

	// reset-offsets --execute moves the committed offsets.
	cmd("", "groups", "reset-offsets", "g1", "--topic", "orders", "--to-earliest", "--execute")
	for k, v := range committed(t, adm, "g1") {
		if v != 0 {
			t.Fatalf("after --to-earliest, %s is at %d", k, v)
		}
	}

	// ACLs: kfake keeps them; create, list, delete.
	cmd("", "acls", "create", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders")
	var acls []listedACL
	unmarshal(t, cmd("", "acls", "list", "--json"), &acls)
	if len(acls) != 1 || acls[0] != (listedACL{"User:alice", "*", "READ", "ALLOW", "TOPIC", "orders", "LITERAL"}) {
		t.Fatalf("acls list after create: %+v", acls)
	}
	cmd("", "acls", "delete", "--topic", "orders")
	acls = nil
	unmarshal(t, cmd("", "acls", "list", "--json"), &acls)
	if len(acls) != 0 {
		t.Fatalf("acls list after delete: %+v", acls)
	}

	// cluster describe: kfake's three brokers and its controller.
	var s map[string]any
	unmarshal(t, cmd("", "cluster", "describe", "--json"), &s)
	if bs, _ := s["brokers"].([]any); len(bs) != 3 || s["healthy"] != true {
		t.Fatalf("cluster describe --json: %v", s)
	}

	// delete, and groups delete once the group is empty.
	cmd("", "groups", "delete", "g1")
	if os, err := adm.FetchOffsets(ctx, "g1"); err == nil && os.Error() == nil && len(os) != 0 {
		t.Fatalf("offsets after groups delete: %v", os)
	}
	if gl, err := adm.ListGroups(ctx); err != nil || slices.Contains(gl.Groups(), "g1") {
		t.Fatalf("groups after groups delete: %v %v", gl.Groups(), err)
	}
	cmd("", "topics", "delete", "orders")
	waitFor(t, "orders deleted", func() bool {
		d, err := adm.ListTopics(ctx)
		_, still := d["orders"]
		return err == nil && !still
	})
}

// mapsSubset reports whether every key of got has want's value.
func mapsSubset(got, want map[string]int64) bool {
	for k, v := range got {
		if want[k] != v {
			return false
		}
	}
	return true
}
