package console_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/tandem-kafka/tandem/console"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

func TestMain(m *testing.M) { os.Exit(tandemtest.Main(m)) }

func serve(t *testing.T, b console.Broker) string {
	t.Helper()
	ts := httptest.NewServer(console.New(b, slog.New(slog.DiscardHandler), func() bool { return true }))
	t.Cleanup(ts.Close)
	return ts.URL
}

func get(t *testing.T, url, user, pw string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, pw)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestConsoleAuth: with an authorizer on, the console asks for the
// broker's SASL users (PLAIN from the listener, SCRAM from the metadata
// quorum) and serves those allowed to describe the cluster.
func TestConsoleAuth(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	saslAddr := ln.Addr().String()
	ln.Close()
	b := tandemtest.StartInProcess(t, map[string]string{
		"listeners":               "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://" + saslAddr,
		"tandem.sasl.plain.users": "admin:admin-secret,bob:bob-secret",
		"authorizer.class.name":   "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
		"super.users":             "User:admin",
	})
	url := serve(t, b) + "/api/cluster"

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(tandemtest.Client(t, saslAddr, kgo.SASL(plain.Auth{User: "admin", Pass: "admin-secret"}.AsMechanism())))
	res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "carol", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "carol-secret"}})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatalf("SCRAM credential for carol: %v", err)
	}
	acl := kadm.NewACLs().Allow("User:carol").Clusters().Operations(kadm.OpDescribe)
	if _, err := adm.CreateACLs(ctx, acl); err != nil {
		t.Fatalf("ACL for carol: %v", err)
	}

	for _, c := range []struct {
		user, pw string
		want     int
	}{
		{"", "", http.StatusUnauthorized},
		{"admin", "wrong", http.StatusUnauthorized},
		{"nobody", "admin-secret", http.StatusUnauthorized},
		{"carol", "wrong", http.StatusUnauthorized},
		{"bob", "bob-secret", http.StatusForbidden}, // a user, not allowed to describe the cluster
		{"admin", "admin-secret", http.StatusOK},    // PLAIN, super user
		{"carol", "carol-secret", http.StatusOK},    // SCRAM, DESCRIBE on the cluster
	} {
		var code int
		var body string
		// The ACL and the credential reach the image shortly after
		// the admin call returns.
		deadline := time.Now().Add(20 * time.Second)
		for {
			code, body = get(t, url, c.user, c.pw)
			if code == c.want || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if code != c.want {
			t.Fatalf("user %q password %q: %d %s, want %d", c.user, c.pw, code, body, c.want)
		}
		if code == http.StatusOK && !strings.Contains(body, `"clusterId"`) {
			t.Fatalf("user %q: %s", c.user, body)
		}
	}

	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("{}"))
	req.SetBasicAuth("admin", "admin-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d, want 405: the console is read-only", resp.StatusCode)
	}
}

// TestConsoleData: the topics and groups pages read the broker's image,
// its logs and the groups plugin: a group's committed offsets and its lag
// to the high watermark; the bundle is served.
func TestConsoleData(t *testing.T) {
	b := tandemtest.StartInProcess(t, map[string]string{"offsets.topic.num.partitions": "2"})
	base := serve(t, b)
	tandemtest.CreateTopic(t, b.Addr(), "events", 2)
	cl := tandemtest.Client(t, b.Addr(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for i := range 10 {
		recs = append(recs, &kgo.Record{Topic: "events", Partition: 1, Value: []byte{byte(i)}})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	offs := kadm.Offsets{}
	offs.AddOffset("events", 1, 4, -1)
	if res, err := kadm.NewClient(cl).CommitOffsets(ctx, "billing", offs); err != nil || res.Error() != nil {
		t.Fatalf("commit: %v %v", err, res.Error())
	}

	var topics []struct {
		Name       string
		Partitions []struct {
			Partition     int32
			Leader        int32
			HighWatermark int64
		}
	}
	decode(t, base+"/api/topics", &topics)
	found := false
	for _, tv := range topics {
		if tv.Name == "events" {
			found = len(tv.Partitions) == 2 && tv.Partitions[1].HighWatermark == 10 && tv.Partitions[0].HighWatermark == 0 && tv.Partitions[1].Leader == 1
		}
	}
	if !found {
		t.Fatalf("topics page: %+v", topics)
	}

	var groups []struct {
		Name, State string
		Lag         int64
		Partitions  []struct {
			Topic               string
			Partition           int32
			Committed, End, Lag int64
		}
	}
	decode(t, base+"/api/groups", &groups)
	if len(groups) != 1 || groups[0].Name != "billing" || groups[0].State != "Empty" || groups[0].Lag != 6 ||
		len(groups[0].Partitions) != 1 || groups[0].Partitions[0].Committed != 4 || groups[0].Partitions[0].End != 10 {
		t.Fatalf("groups page: %+v", groups)
	}

	var mirrors []any
	decode(t, base+"/api/mirrors", &mirrors)
	if len(mirrors) != 0 {
		t.Fatalf("mirrors without any: %+v", mirrors)
	}
	for _, path := range []string{"/", "/app.js", "/style.css"} {
		if code, body := get(t, base+path, "", ""); code != http.StatusOK || len(body) < 100 {
			t.Fatalf("%s: %d", path, code)
		}
	}
}

func decode(t *testing.T, url string, v any) {
	t.Helper()
	code, body := get(t, url, "", "")
	if code != http.StatusOK {
		t.Fatalf("%s: %d %s", url, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("%s: %v\n%s", url, err, body)
	}
}
