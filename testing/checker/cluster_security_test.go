package checker_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/tandem-kafka/tandem/raftmeta/metadata"
	"github.com/tandem-kafka/tandem/testing/checker"
	"github.com/tandem-kafka/tandem/testing/tandemtest"
)

// TestClusterInterBrokerSASL runs a three-broker cluster whose only
// listener, also the inter-broker one, is SASL_PLAINTEXT with an
// authorizer: clients log in with PLAIN, brokers with SCRAM-SHA-256, whose
// credential lives in the cluster metadata, as a principal that is not a
// super user but has CLUSTER_ACTION on the cluster. An RF=3
// topic replicates (every ISR full), survives the kill of a leader, and a
// broker restarted with a wrong inter-broker password reports the
// refusal per peer in Health and stays out of the ISR until it is
// restarted with the right one. Every acknowledged record is read back
// where it was acknowledged.
func TestClusterInterBrokerSASL(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const jaasScram = `org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="%s";`
	c := tandemtest.StartCluster(t, 3, map[string]string{
		"listeners":                                                   "SASL_PLAINTEXT://127.0.0.1:0",
		"inter.broker.listener.name":                                  "SASL_PLAINTEXT",
		"sasl.enabled.mechanisms":                                     "PLAIN,SCRAM-SHA-256",
		"sasl.mechanism.inter.broker.protocol":                        "SCRAM-SHA-256",
		"listener.name.sasl_plaintext.plain.sasl.jaas.config":         `org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret";`,
		"listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": fmt.Sprintf(jaasScram, "broker-secret"),
		"authorizer.class.name":                                       "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
		"super.users":                                                 "User:admin",
		"replica.lag.time.max.ms":                                     "3000",
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := []kgo.Opt{kgo.SeedBrokers(c.Addrs()...),
		kgo.SASL(plain.Auth{User: "admin", Pass: "admin-secret"}.AsMechanism())}
	cl := tandemtest.Client(t, c.Addrs()[0], append(admin, kgo.RecordRetries(10), kgo.RecordDeliveryTimeout(30*time.Second))...)
	adm := kadm.NewClient(cl)

	// The brokers' own SCRAM credential, as an operator creates it.
	if _, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{
		User: "broker", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "broker-secret",
	}}); err != nil {
		t.Fatal(err)
	}
	// Not a super user: replica fetches need CLUSTER_ACTION.
	acl := kadm.NewACLs().Allow("User:broker").AllowHosts().Clusters().
		Operations(kadm.OpClusterAction).ResourcePatternType(kadm.ACLPatternLiteral)
	if res, err := adm.CreateACLs(ctx, acl); err != nil || res[0].Err != nil {
		t.Fatalf("CLUSTER_ACTION for the brokers: %v %+v", err, res)
	}
	c.WaitFor("the brokers' SCRAM credential and ACL", func(img *metadata.Image) bool {
		_, ok := img.Scram["broker"]["SCRAM-SHA-256"]
		return ok && len(img.ACLs) == 1
	})
	const topic = "secured"
	resp, err := adm.CreateTopic(ctx, 2, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	var h checker.History
	produce := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			v := fmt.Sprintf("s%04d", i)
			r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: int32(i % 2), Value: []byte(v)}).First()
			if err != nil {
				t.Fatalf("produce %s: %v", v, err)
			}
			h.Acked(v, checker.Place{Partition: r.Partition, Offset: r.Offset})
		}
	}
	isr := func(want func(p metadata.Partition) bool, what string) {
		t.Helper()
		c.WaitFor(what, func(img *metadata.Image) bool {
			tp := img.Topics[topic]
			if tp == nil {
				return false
			}
			for _, p := range tp.Partitions {
				if !want(p) {
					return false
				}
			}
			return true
		})
	}
	full := func(p metadata.Partition) bool { return len(p.ISR) == 3 }
	produce(0, 100)
	isr(full, "every ISR full: followers fetch over SASL")

	// kill -9 of a leader: the others elect a new one and go on; the old
	// leader comes back, logs in again and catches up.
	leader := c.Leader(topic, 0)
	c.Broker(leader).Kill()
	produce(100, 200)
	c.Broker(leader).Restart()
	isr(full, "every ISR full after the leader came back")

	// A broker restarted with a wrong password: its peers refuse it, it
	// says so in Health, and it stays out of every ISR.
	bad := c.Leader(topic, 0)
	if bad == c.Image().ControllerID {
		bad = c.Leader(topic, 1)
	}
	if bad == c.Image().ControllerID {
		for _, b := range c.Brokers {
			if b.ID != bad {
				bad = b.ID
				break
			}
		}
	}
	c.Broker(bad).Kill()
	out := func(p metadata.Partition) bool { return !slices.Contains(p.ISR, bad) && p.Leader != bad }
	isr(out, fmt.Sprintf("broker %d out of every ISR", bad))
	produce(200, 300)
	c.Broker(bad).Props = map[string]string{
		"listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": fmt.Sprintf(jaasScram, "wrong"),
	}
	c.Broker(bad).Restart()
	var health string
	waitCond(t, 30*time.Second, fmt.Sprintf("broker %d with a wrong password", bad), func() error {
		if health = strings.Join(c.Broker(bad).Broker().Health(), "; "); !strings.Contains(health, "SASL_AUTHENTICATION_FAILED") {
			return fmt.Errorf("health %q does not name the refused login", health)
		}
		return nil
	})
	t.Logf("health of broker %d: %s", bad, health)
	produce(300, 400)
	// Well past replica.lag.time.max.ms: it never caught up, so it never
	// joined.
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		for _, p := range c.Image().Topics[topic].Partitions {
			if slices.Contains(p.ISR, bad) {
				t.Fatalf("broker %d with a wrong password joined the ISR: %+v", bad, p)
			}
		}
	}

	// With the right password again it catches up and rejoins.
	c.Broker(bad).Kill()
	c.Broker(bad).Props = nil
	c.Broker(bad).Restart()
	isr(full, "every ISR full with the right password")
	waitCond(t, 10*time.Second, fmt.Sprintf("broker %d", bad), func() error {
		if h := c.Broker(bad).Broker().Health(); len(h) > 0 {
			return fmt.Errorf("still unhealthy: %v", h)
		}
		return nil
	})

	read, err := checker.ReadAll(ctx, topic, admin...)
	if err != nil {
		t.Fatal(err)
	}
	rep := h.Check(read)
	t.Log(rep)
	if !rep.OK() || rep.Acked != 400 {
		t.Fatal(rep)
	}
}
