package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain runs the command itself when KDB_MQTT_TEST_MAIN is set (a
// child started by a test), with the arguments after "--".
func TestMain(m *testing.M) {
	if os.Getenv("KDB_MQTT_TEST_MAIN") == "1" {
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{"kdb-mqtt"}, os.Args[i+1:]...)
				break
			}
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestLog_StoreReadTimeCountsTheOpen: store_read_time and serve_time count
// the store's kdb.Open (its recovery), as the peers' brokers count their
// database's open in their hook's Init; before, kdb-mqtt's open was in
// neither, and the restart comparison weighed kdb's hook without it (an
// outside review). A new store's Open takes its first checkpoint, some
// fsyncs: the logged times are at least the recovery's total_time.
func TestLog_StoreReadTimeCountsTheOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	cmd := exec.Command(os.Args[0], "-test.run=^$", "--", "-store", dir, "-listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "KDB_MQTT_TEST_MAIN=1")
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var recovered, listening string
	deadline := time.After(time.Minute)
	for listening == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("kdb-mqtt ended before listening (recovered: %q)", recovered)
			}
			switch {
			case strings.Contains(l, "store recovered"):
				recovered = l
			case strings.Contains(l, "kdb-mqtt: listening"):
				listening = l
			}
		case <-deadline:
			t.Fatal("kdb-mqtt did not listen within a minute")
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	go func() {
		for range lines {
		}
	}()
	field := func(line, name string) time.Duration {
		t.Helper()
		m := regexp.MustCompile(name + `=(\S+)`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("no %s in %q", name, line)
		}
		d, err := time.ParseDuration(m[1])
		if err != nil {
			t.Fatalf("%s in %q: %v", name, line, err)
		}
		return d
	}
	total := field(recovered, "total_time")
	read, serve := field(listening, "store_read_time"), field(listening, "serve_time")
	if read < total || serve < read {
		t.Errorf("store_read_time %v, serve_time %v, the store's recovery %v: want recovery <= store_read_time <= serve_time\n%s\n%s",
			read, serve, total, recovered, listening)
	}
}
