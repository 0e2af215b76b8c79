package tandem_test

import (
	"testing"

	"github.com/tandem-kafka/tandem"
	"github.com/tandem-kafka/tandem/server"
)

// TestNewBrokerCapabilities: the broker of tandem serve provides what every
// plugin's properties ask for (server.New refuses them without the plugin),
// and an invalid plugin property is refused when the broker is built.
func TestNewBrokerCapabilities(t *testing.T) {
	props := map[string]string{
		"authorizer.class.name":            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
		"super.users":                      "User:admin",
		"listeners":                        "SASL_PLAINTEXT://127.0.0.1:0",
		"sasl.enabled.mechanisms":          "SCRAM-SHA-512",
		"mirror.topics.include":            "orders.*",
		"transaction.max.timeout.ms":       "60000",
		"offsets.topic.num.partitions":     "4",
		"group.initial.rebalance.delay.ms": "0",
	}
	if _, err := tandem.NewBroker(server.Config{DataDir: t.TempDir(), Props: props}); err != nil {
		t.Fatal(err)
	}
	for key, bad := range map[string]string{
		"super.users":                          "admin",
		"offsets.topic.num.partitions":         "-1",
		"transaction.state.log.num.partitions": "x",
		"mirror.topic.num.partitions":          "0",
	} {
		if _, err := tandem.NewBroker(server.Config{DataDir: t.TempDir(), Props: map[string]string{key: bad}}); err == nil {
			t.Errorf("%s=%s: NewBroker succeeded", key, bad)
		}
	}
}
