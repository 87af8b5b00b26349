package kdbmqtt_test

import (
	"os"
	"os/exec"
	"testing"
)

// TestMosquittoClients runs testdata/mosquitto.sh: kdb-mqtt driven by
// Debian's mosquitto_pub and mosquitto_sub (CI installs mosquitto-clients,
// see ci-packages), killed with -9 and restarted.
func TestMosquittoClients(t *testing.T) {
	for _, tool := range []string{"mosquitto_pub", "mosquitto_sub", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: install Debian's mosquitto-clients (apt-get install mosquitto-clients) to run this test", tool)
		}
	}
	bin := buildBin(t, "./cmd/kdb-mqtt")
	cmd := exec.Command("bash", "testdata/mosquitto.sh")
	cmd.Env = append(os.Environ(), "KDB_MQTT_BIN="+bin, "WORK="+t.TempDir())
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("testdata/mosquitto.sh: %v", err)
	}
}
