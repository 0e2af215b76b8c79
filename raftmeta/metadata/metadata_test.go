package metadata_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
)

// TestDataDriven runs the files in testdata: batches of records applied to
// an image, as the controller applies the raft log, the image printed
// after every batch, and Diff between images. The commands are:
//
//	reset
//	    starts over from the empty image a new controller starts with.
//	apply [index=N] [quiet]
//	<one JSON record per line, as in a raft log command>
//	    decodes the records as one batch (DecodeBatch), applies it at raft
//	    index N (default: the last index plus one) and prints the image
//	    ("ok" if quiet), or the error and "image unchanged".
//	image
//	    prints the current image.
//	save name=X / load name=X
//	    keeps the current image under a name / makes a kept one current.
//	diff from=X [to=Y]
//	    prints Diff(X, Y); X "nil" is Diff's nil old image, Y is the
//	    current image when not given.
//
// A JSON string "@name" in a record is a UUID (a topic ID, a broker's
// incarnation): the same name is the same UUID, printed back as @name.
// Every apply also checks what Apply promises beyond its result: the old
// image is not modified, a rejected batch leaves no image, and the new
// image survives a snapshot (JSON, Restored) unchanged.
//
// go test ./raftmeta/metadata -rewrite rewrites the expected output.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := newHarness()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

type harness struct {
	cur   *metadata.Image
	index uint64
	saved map[string]*metadata.Image
	names map[metadata.UUID]string // @name aliases
}

func newHarness() *harness {
	h := &harness{saved: map[string]*metadata.Image{}, names: map[metadata.UUID]string{}}
	h.reset()
	return h
}

// reset makes the current image the one raftmeta's controller starts from.
func (h *harness) reset() {
	h.cur = &metadata.Image{ControllerID: -1}
	h.cur.EnsureMaps()
	h.index = 0
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "reset":
		h.reset()
		return "ok"
	case "image":
		return h.render(h.cur)
	case "save", "load":
		var name string
		d.ScanArgs(t, "name", &name)
		if d.Cmd == "save" {
			h.saved[name] = h.cur
			return "ok"
		}
		img := h.saved[name]
		if img == nil {
			d.Fatalf(t, "no image saved as %q", name)
		}
		h.cur, h.index = img, img.Index
		return "ok"
	case "apply":
		return h.apply(t, d)
	case "diff":
		var from, to string
		d.ScanArgs(t, "from", &from)
		d.MaybeScanArgs(t, "to", &to)
		old, img := h.image(t, d, from), h.cur
		if to != "" {
			img = h.image(t, d, to)
		}
		return h.renderDelta(metadata.Diff(old, img), old, img)
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

func (h *harness) image(t *testing.T, d *datadriven.TestData, name string) *metadata.Image {
	if name == "nil" {
		return nil
	}
	img := h.saved[name]
	if img == nil {
		d.Fatalf(t, "no image saved as %q", name)
	}
	return img
}

var alias = regexp.MustCompile(`"@([A-Za-z0-9_.-]{1,16})"`)

// uuidOf is the UUID an @name stands for: the name's bytes, right-aligned.
func uuidOf(name string) metadata.UUID {
	var u metadata.UUID
	copy(u[len(u)-len(name):], name)
	return u
}

func (h *harness) apply(t *testing.T, d *datadriven.TestData) string {
	index := h.index + 1
	d.MaybeScanArgs(t, "index", &index)
	var lines []string
	for l := range strings.Lines(d.Input) {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, alias.ReplaceAllStringFunc(l, func(s string) string {
				name := s[2 : len(s)-1]
				u := uuidOf(name)
				h.names[u] = name
				return `"` + u.String() + `"`
			}))
		}
	}
	recs, err := metadata.DecodeBatch([]byte(`{"records":[` + strings.Join(lines, ",") + `]}`))
	if err != nil {
		d.Fatalf(t, "records: %v", err)
	}

	old := h.cur
	before, beforeJSON := h.render(old), snapshot(t, old)
	img, err := metadata.Apply(old, recs, index)
	if after := h.render(old); after != before || snapshot(t, old) != beforeJSON {
		d.Fatalf(t, "Apply modified the old image:\n%s\nbecame\n%s", before, after)
	}
	if err != nil {
		if img != nil {
			d.Fatalf(t, "Apply returned an image with its error %v", err)
		}
		return h.renderError(err) + "\nimage unchanged"
	}
	if img == old {
		d.Fatalf(t, "Apply returned the old image itself")
	}
	img.Index = index // as raftmeta's FSM does
	// A voter that restores the image from a snapshot must hold the same
	// image as one that applied the log.
	var restored metadata.Image
	if err := json.Unmarshal([]byte(snapshot(t, img)), &restored); err != nil {
		d.Fatalf(t, "decoding the snapshot: %v", err)
	}
	restored.Restored()
	if !reflect.DeepEqual(&restored, img) {
		d.Fatalf(t, "the image restored from its snapshot differs:\n%s\nrestored:\n%s", h.render(img), h.render(&restored))
	}
	h.cur, h.index = img, index
	if d.HasArg("quiet") {
		return "ok"
	}
	return h.render(img)
}

// renderError prints err, which must wrap a Kafka error code, without
// the code's description (franz-go's wording, not Tandem's) and with the
// @names of UUIDs.
func (h *harness) renderError(err error) string {
	s := err.Error()
	var ke *kerr.Error
	if errors.As(err, &ke) {
		s = strings.Replace(s, ke.Error(), ke.Message, 1)
	} else {
		s += " (NO KAFKA ERROR CODE)"
	}
	for u, name := range h.names {
		s = strings.ReplaceAll(s, u.String(), "@"+name)
	}
	return "error: " + s
}

func snapshot(t *testing.T, img *metadata.Image) string {
	b, err := json.Marshal(img)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (h *harness) id(u metadata.UUID) string {
	if name, ok := h.names[u]; ok {
		return "@" + name
	}
	return u.String()
}

// render prints every field of img, sorted, leaving out empty sections and
// zero optional values. TestRenderCoversEveryField keeps it complete.
func (h *harness) render(img *metadata.Image) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("index=%d cluster=%q controller=%d next-producer-id=%d", img.Index, img.ClusterID, img.ControllerID, img.NextProducerID)

	if len(img.Brokers) > 0 {
		p("brokers:")
	}
	for _, id := range slices.Sorted(maps.Keys(img.Brokers)) {
		br := img.Brokers[id]
		if br.ID != id {
			p("  BROKER %d UNDER KEY %d", br.ID, id)
		}
		s := fmt.Sprintf("  %d %s:%d epoch=%d", br.ID, br.Host, br.Port, br.Epoch)
		s += opt("rack", br.Rack) + opt("endpoints", br.Endpoints) + opt("metadata-addr", br.MetadataAddr)
		if !br.Incarnation.IsZero() {
			s += " incarnation=" + h.id(br.Incarnation)
		}
		s += flag("fenced", br.Fenced) + flag("shutting-down", br.ShuttingDown) + flag("disk-full", br.DiskFull)
		s += flag("live", br.Live())
		p("%s", s)
	}

	if len(img.Topics) > 0 || len(img.TopicsByID) > 0 {
		p("topics:")
	}
	for _, name := range slices.Sorted(maps.Keys(img.Topics)) {
		tp := img.Topics[name]
		s := fmt.Sprintf("  %s id=%s", tp.Name, h.id(tp.ID))
		if tp.Name != name {
			s += fmt.Sprintf(" UNDER NAME %q", name)
		}
		if img.TopicsByID[tp.ID] != tp || img.Topic(tp.ID) != tp {
			s += " NOT IN TopicsByID"
		}
		s += flag("internal", tp.Internal) + configs(" configs", tp.Configs)
		p("%s", s)
		for i, pt := range tp.Partitions {
			s := fmt.Sprintf("    %d replicas=%v isr=%v leader=%d leader-epoch=%d partition-epoch=%d",
				i, pt.Replicas, pt.ISR, pt.Leader, pt.LeaderEpoch, pt.PartitionEpoch)
			if len(pt.AddingReplicas)+len(pt.RemovingReplicas) > 0 {
				s += fmt.Sprintf(" adding=%v removing=%v target=%v", pt.AddingReplicas, pt.RemovingReplicas, pt.Target())
			}
			p("%s", s)
		}
	}
	for _, id := range slices.SortedFunc(maps.Keys(img.TopicsByID), func(a, b metadata.UUID) int { return strings.Compare(a.String(), b.String()) }) {
		if tp := img.TopicsByID[id]; img.Topics[tp.Name] != tp || tp.ID != id {
			p("  TopicsByID[%s] = %s id=%s NOT IN Topics", h.id(id), tp.Name, h.id(tp.ID))
		}
	}

	if len(img.BrokerConfigs) > 0 {
		p("%s", configs("broker-configs", img.BrokerConfigs))
	}
	if len(img.NodeConfigs) > 0 {
		p("node-configs:")
	}
	for _, id := range slices.Sorted(maps.Keys(img.NodeConfigs)) {
		p("  %d%s", id, configs("", img.NodeConfigs[id]))
	}
	if len(img.GroupConfigs) > 0 {
		p("group-configs:")
	}
	for _, g := range slices.Sorted(maps.Keys(img.GroupConfigs)) {
		p("  %s%s", g, configs("", img.GroupConfigs[g]))
	}

	if len(img.ACLs) > 0 {
		p("acls:")
	}
	for _, a := range img.ACLs { // Apply keeps them sorted: print them as they are
		p("  %s", renderACL(a))
	}
	if len(img.Scram) > 0 {
		p("scram:")
	}
	for _, user := range slices.Sorted(maps.Keys(img.Scram)) {
		for _, mech := range slices.Sorted(maps.Keys(img.Scram[user])) {
			c := img.Scram[user][mech]
			s := fmt.Sprintf("  %s %s", user, mech)
			if c.User != user || c.Mechanism != mech {
				s += fmt.Sprintf(" UNDER %s %s", c.User, c.Mechanism)
			}
			p("%s iterations=%d salt=%x stored-key=%x server-key=%x", s, c.Iterations, c.Salt, c.StoredKey, c.ServerKey)
		}
	}
	if len(img.ClientQuotas) > 0 {
		p("client-quotas:")
	}
	for _, key := range slices.Sorted(maps.Keys(img.ClientQuotas)) {
		q := img.ClientQuotas[key]
		s := fmt.Sprintf("  %q", key)
		if q.Entity.Key() != key {
			s += fmt.Sprintf(" UNDER %q", q.Entity.Key())
		}
		vals := make([]string, 0, len(q.Values))
		for _, k := range slices.Sorted(maps.Keys(q.Values)) {
			vals = append(vals, k+"="+strconv.FormatFloat(q.Values[k], 'f', -1, 64))
		}
		p("%s {%s}", s, strings.Join(vals, " "))
	}

	if len(img.Mirrors) > 0 {
		p("mirrors:")
	}
	for _, name := range slices.Sorted(maps.Keys(img.Mirrors)) {
		m := img.Mirrors[name]
		s := "  " + m.Name
		if m.Name != name {
			s += fmt.Sprintf(" UNDER NAME %q", name)
		}
		p("%s%s%s", s, configs(" configs", m.Configs), opt("source-cluster", m.SourceClusterID))
		for _, tn := range slices.Sorted(maps.Keys(m.Topics)) {
			mt := m.Topics[tn]
			p("    topic %s id=%s%s%s source-name=%s", tn, h.id(mt.ID), flag("stopped", mt.Stopped), opt("source", mt.Source), mt.SourceName(tn))
		}
		for _, a := range m.ManagedACLs {
			p("    managed-acl %s", renderACL(a))
		}
	}
	return b.String()
}

func opt(key, v string) string {
	if v == "" {
		return ""
	}
	return " " + key + "=" + v
}

func flag(name string, set bool) string {
	if !set {
		return ""
	}
	return " " + name
}

func configs(prefix string, m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	kv := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kv = append(kv, k+"="+m[k])
	}
	return prefix + " {" + strings.Join(kv, " ") + "}"
}

func renderACL(a metadata.ACL) string {
	s := fmt.Sprintf("%s:%s:%s %s@%s %s %s",
		kmsg.ACLResourceType(a.ResourceType), kmsg.ACLResourcePatternType(a.PatternType), a.ResourceName,
		a.Principal, a.Host, kmsg.ACLOperation(a.Operation), kmsg.ACLPermissionType(a.Permission))
	if !a.Valid() {
		s += " INVALID"
	}
	return s
}

// renderDelta prints a Delta, naming topics from the images they are in.
func (h *harness) renderDelta(d metadata.Delta, old, cur *metadata.Image) string {
	var b strings.Builder
	if d.Empty() {
		b.WriteString("empty\n")
	}
	topic := func(img *metadata.Image, id metadata.UUID) string {
		if img != nil && img.Topic(id) != nil {
			return img.Topic(id).Name + " id=" + h.id(id)
		}
		return "? id=" + h.id(id)
	}
	for _, id := range d.CreatedTopics {
		fmt.Fprintf(&b, "created %s\n", topic(cur, id))
	}
	for _, id := range d.ChangedTopics {
		fmt.Fprintf(&b, "changed %s\n", topic(cur, id))
	}
	for _, tp := range d.DeletedTopics {
		fmt.Fprintf(&b, "deleted %s id=%s partitions=%d\n", tp.Name, h.id(tp.ID), len(tp.Partitions))
		if old == nil || old.Topic(tp.ID) != tp {
			fmt.Fprintf(&b, "  NOT THE OLD IMAGE'S TOPIC\n")
		}
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"brokers-changed", d.BrokersChanged}, {"broker-configs-changed", d.BrokerConfigsChanged}, {"security-changed", d.SecurityChanged}} {
		if f.set {
			fmt.Fprintf(&b, "%s\n", f.name)
		}
	}
	return b.String()
}

// TestRenderCoversEveryField fails when a type the image is made of gains
// or loses a field: render (and renderDelta) must then print it, so that
// the testdata shows every part of the image, and this list follows.
func TestRenderCoversEveryField(t *testing.T) {
	want := map[reflect.Type][]string{
		reflect.TypeFor[metadata.Image]():           {"Index", "ClusterID", "ControllerID", "Brokers", "Topics", "TopicsByID", "BrokerConfigs", "NodeConfigs", "NextProducerID", "ACLs", "Scram", "ClientQuotas", "Mirrors", "GroupConfigs"},
		reflect.TypeFor[metadata.Broker]():          {"ID", "Host", "Port", "Rack", "Endpoints", "Epoch", "Incarnation", "Fenced", "ShuttingDown", "DiskFull", "MetadataAddr"},
		reflect.TypeFor[metadata.Topic]():           {"Name", "ID", "Partitions", "Configs", "Internal"},
		reflect.TypeFor[metadata.Partition]():       {"Replicas", "ISR", "Leader", "LeaderEpoch", "PartitionEpoch", "AddingReplicas", "RemovingReplicas"},
		reflect.TypeFor[metadata.ACL]():             {"ResourceType", "ResourceName", "PatternType", "Principal", "Host", "Operation", "Permission"},
		reflect.TypeFor[metadata.ScramCredential](): {"User", "Mechanism", "Salt", "StoredKey", "ServerKey", "Iterations"},
		reflect.TypeFor[metadata.ClientQuota]():     {"Entity", "Values"},
		reflect.TypeFor[metadata.Mirror]():          {"Name", "Configs", "Topics", "SourceClusterID", "ManagedACLs"},
		reflect.TypeFor[metadata.MirrorTopic]():     {"ID", "Stopped", "Source"},
		reflect.TypeFor[metadata.Delta]():           {"CreatedTopics", "DeletedTopics", "ChangedTopics", "BrokersChanged", "BrokerConfigsChanged", "SecurityChanged"},
	}
	for typ, fields := range want {
		var got []string
		for _, f := range reflect.VisibleFields(typ) {
			if !f.Anonymous {
				got = append(got, f.Name)
			}
		}
		slices.Sort(got)
		slices.Sort(fields)
		if !slices.Equal(got, fields) {
			t.Errorf("%s has fields %v; the test renders %v: print the new ones in metadata_test.go", typ, got, fields)
		}
	}
}

// TestRecordTypesCovered fails when a record type is applied by no
// testdata. The types are the package's RecordType constants, read from
// its source, so a new record type fails here until testdata covers it.
func TestRecordTypesCovered(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var types []metadata.RecordType
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, spec := range g.Specs {
					vs := spec.(*ast.ValueSpec)
					if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "RecordType" {
						for _, v := range vs.Values {
							lit := v.(*ast.BasicLit)
							s, _ := strconv.Unquote(lit.Value)
							types = append(types, metadata.RecordType(s))
						}
					}
				}
			}
		}
	}
	if len(types) < 18 {
		t.Fatalf("found only the record types %v in the source", types)
	}
	seen := map[metadata.RecordType]bool{}
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "apply" {
				for l := range strings.Lines(d.Input) {
					var r struct{ Type metadata.RecordType }
					if json.Unmarshal([]byte(l), &r) == nil {
						seen[r.Type] = true
					}
				}
			}
			return d.Expected
		})
	})
	for _, typ := range types {
		if !seen[typ] {
			t.Errorf("no testdata applies a %s record", typ)
		}
	}
}
