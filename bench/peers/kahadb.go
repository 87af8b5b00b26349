package peers

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// ActiveMQ KahaDB, the message store kdb's broker is compared with: run as
// a Java program (kahadb/KahaPairs.java) against Debian's ActiveMQ 5.17.2
// jars (package libactivemq-java), compiled with javac on first use. See
// README.md, "The broker against KahaDB".

// kahaJars are the jars KahaPairs needs, found in kahaJarDir.
var kahaJars = []string{
	"activemq-kahadb-store.jar", "activemq-broker.jar", "activemq-client.jar",
	"activemq-openwire-legacy.jar", "activemq-protobuf.jar", "hawtbuf.jar",
	"slf4j-api.jar", "geronimo-jms_1.1_spec.jar", "geronimo-j2ee-management-1.1-spec.jar",
}

// kahaJarDir is where Debian installs them; KDB_KAHADB_JARS overrides it.
func kahaJarDir() string {
	if d := os.Getenv("KDB_KAHADB_JARS"); d != "" {
		return d
	}
	return "/usr/share/java"
}

// ErrNoKahaDB says that Java or the ActiveMQ jars are missing.
var ErrNoKahaDB = errors.New("peers: KahaDB needs java, javac and the ActiveMQ 5.17 jars (Debian: apt-get install openjdk-17-jdk-headless libactivemq-java)")

var kaha struct {
	once sync.Once
	cp   string // the classpath: the compiled harness, then the jars
	out  string // the compiled harness's temporary directory
	err  error
}

// RemoveKahaBuild removes the compiled harness, if it was built.
func RemoveKahaBuild() {
	if kaha.out != "" {
		os.RemoveAll(kaha.out)
	}
}

// kahaClasspath compiles KahaPairs (once per process, into a temporary
// directory) and returns the classpath that runs it.
func kahaClasspath() (string, error) {
	kaha.once.Do(func() {
		for _, tool := range []string{"java", "javac"} {
			if _, err := exec.LookPath(tool); err != nil {
				kaha.err = fmt.Errorf("%w: %s: %v", ErrNoKahaDB, tool, err)
				return
			}
		}
		cp := []string{}
		for _, j := range kahaJars {
			p := filepath.Join(kahaJarDir(), j)
			if _, err := os.Stat(p); err != nil {
				kaha.err = fmt.Errorf("%w: %v", ErrNoKahaDB, err)
				return
			}
			cp = append(cp, p)
		}
		src, err := kahaSource()
		if err != nil {
			kaha.err = err
			return
		}
		out, err := os.MkdirTemp("", "kdb-kahapairs-")
		if err != nil {
			kaha.err = err
			return
		}
		kaha.out = out
		jars := strings.Join(cp, string(os.PathListSeparator))
		cmd := exec.Command("javac", "-nowarn", "-cp", jars, "-d", out, src)
		if msg, err := cmd.CombinedOutput(); err != nil {
			kaha.err = fmt.Errorf("peers: javac %s: %v\n%s", src, err, msg)
			return
		}
		kaha.cp = out + string(os.PathListSeparator) + jars
	})
	return kaha.cp, kaha.err
}

// kahaSource finds kahadb/KahaPairs.java beside this package's source (a
// test's or benchmark's working directory is the package's).
func kahaSource() (string, error) {
	p, err := filepath.Abs(filepath.Join("kahadb", "KahaPairs.java"))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("peers: the KahaDB harness: %w (run from bench/peers)", err)
	}
	return p, nil
}

// KahaDBPairs runs KahaPairs in a fresh store in dir (which must not
// exist): warmup untimed send-then-ack pairs, then pairs timed, from
// producers threads; syncAcks makes every ack synced too. It returns the
// pairs per second of the timed part, as the harness measured it (the
// JVM's start and the warm-up are not in it).
func KahaDBPairs(dir string, producers, pairs, warmup int, syncAcks bool) (float64, error) {
	cp, err := kahaClasspath()
	if err != nil {
		return 0, err
	}
	acks := "async"
	if syncAcks {
		acks = "sync"
	}
	cmd := exec.Command("java", "-cp", cp, "KahaPairs", dir, strconv.Itoa(producers), strconv.Itoa(pairs), acks, strconv.Itoa(warmup))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("peers: KahaPairs: %v\n%s%s", err, stdout.Bytes(), stderr.Bytes())
	}
	return parseKahaPairs(stdout.String())
}

// parseKahaPairs reads the rate from the harness's last line,
// "pairs=N seconds=S pairs/s=R".
func parseKahaPairs(out string) (float64, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	for _, f := range strings.Fields(last) {
		if v, ok := strings.CutPrefix(f, "pairs/s="); ok {
			r, err := strconv.ParseFloat(v, 64)
			if err != nil || r <= 0 {
				return 0, fmt.Errorf("peers: KahaPairs printed %q", last)
			}
			return r, nil
		}
	}
	return 0, fmt.Errorf("peers: KahaPairs printed %q, no pairs/s", last)
}
