package jvm

import (
	"reflect"
	"testing"
)

func TestMatchJVM(t *testing.T) {
	cases := []struct {
		main     string
		patterns []string
		want     bool
	}{
		{"com.example.Main", nil, true},
		{"com.example.Main", []string{"com.example.Main"}, true},
		{"com.example.Main", []string{"com.example.*"}, true},
		{"com.example.Main", []string{"org.*"}, false},
		{"/opt/app/app.jar", []string{"app.jar"}, true},
		{"/opt/app/app.jar", []string{"*.jar"}, true},
		{"/opt/app/app.jar", []string{"/opt/app/*.jar"}, true},
		{"/opt/app/app.jar", []string{"/opt/*"}, false},
		{"app.jar", []string{"app.jar"}, true},
		{"mymodule/com.example.Main", []string{"com.example.*"}, true},
		{"mymodule/com.example.Main", []string{"mymodule/*"}, true},
		{"", []string{"*"}, false},
		{"kafka.Kafka", []string{"org.*", "kafka.*"}, true},
	}
	for _, c := range cases {
		if _, got := MatchJVM(JVM{MainClass: c.main}, c.patterns); got != c.want {
			t.Errorf("MatchJVM(%q, %q) = %v, want %v", c.main, c.patterns, got, c.want)
		}
	}
}

func TestSelectJVMsNamesPatternsThatMatchedNothing(t *testing.T) {
	jvms := []JVM{{PID: 1, MainClass: "kafka.Kafka"}, {PID: 2, MainClass: "/srv/app.jar"}, {PID: 3, MainClass: "other.Main"}}
	pats, err := ParseJVMPatterns("kafka.*,nothing.*", " app.jar ", "")
	if err != nil {
		t.Fatal(err)
	}
	sel, unmatched := SelectJVMs(jvms, pats)
	if len(sel) != 2 || sel[0].PID != 1 || sel[1].PID != 2 || !reflect.DeepEqual(unmatched, []string{"nothing.*"}) {
		t.Fatalf("selected %+v, unmatched %q", sel, unmatched)
	}
	if _, err := ParseJVMPatterns("[a-"); err == nil {
		t.Fatal("a bad pattern was accepted")
	}
}
