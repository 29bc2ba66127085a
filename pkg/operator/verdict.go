package operator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/inject"
	"github.com/handlerkit/handlerkit/pkg/inject/atstart"
)

// verdict is whether an exporter may give its agent to JVMs now, whatever
// the path: live attach (plan), the admission webhook (AtStartInput) and
// restartOnRefusal's evictions (restartRefused) all read it from verdictOf,
// so that a guard added here holds on every path.
//
// The exporter may act when its config loads, validates and fits
// inject.EncodeConfig's limits, no agent refused that config
// (status.rejectedConfig), its spec.agent is allowed, and its circuit
// breaker is not open for its generation and config (mayAct). The plan's
// later findings (a new refusal, a JVM that ended) change the same fields
// (judge), so the plan's verdict stays the one answer for its look.
type verdict struct {
	// configValid is the ConfigValid condition as the config stands.
	configValid metav1.Condition
	// config is the exporter's config (nil when it cannot be loaded);
	// configSHA its sha256 (hex) and configHash that digest's prefix, as the
	// pods' records keep it, both "" unless the config is valid.
	config     []byte
	configSHA  string
	configHash string
	// generation is the exporter's metadata.generation.
	generation int64
	// agentErr says why spec.agent is refused (agentReason:
	// AgentImageNotAllowed or AgentPathNotAllowed); while it is set nothing
	// runs in any pod.
	agentErr, agentReason string
	// breakerOpen is true while the exporter's circuit breaker holds for
	// the current generation and config.
	breakerOpen bool
	// proven is true when a JVM has run the current generation and config
	// for the breaker window (status.proven): a change is no longer tried on
	// one container first.
	proven bool
}

// verdictOf is the one verdict on exporter ex, whose spec defaulted is
// r.defaulted(ex.Spec): see verdict.
func (r *Reconciler) verdictOf(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter, spec jmxv1alpha1.PrometheusJmxExporterSpec) verdict {
	v := verdict{generation: ex.Generation}
	v.agentReason, v.agentErr = r.checkAgent(ex.Spec.Agent)
	v.config, v.configValid = r.loadConfig(ctx, ex, spec)
	if v.configValid.Status != metav1.ConditionTrue {
		return v
	}
	if _, err := inject.EncodeConfig(v.config); err != nil {
		v.configValid = condition(jmxv1alpha1.ConditionConfigValid, false, jmxv1alpha1.ReasonConfigTooLarge,
			err.Error()+"; no agent was touched: split the rules or drop what is not needed")
		return v
	}
	v.configSHA, v.configHash = configHashes(v.config)
	// Verdicts met earlier on this config, kept in the status so that they
	// survive the pods that gave them and the operator's restarts.
	if rc := ex.Status.RejectedConfig; rc != nil && rc.ConfigSHA256 == v.configSHA {
		v.configValid = rejectedCondition(rc)
	}
	if cb := ex.Status.CircuitBreaker; cb != nil && cb.Generation == ex.Generation && cb.ConfigSHA256 == v.configSHA {
		v.breakerOpen = true
	}
	// A spec and config that a JVM ran for the breaker window stay proven
	// when every such JVM has restarted since: only a change goes to one
	// container first.
	if pr := ex.Status.Proven; pr != nil && pr.Generation == ex.Generation && pr.ConfigSHA256 == v.configSHA {
		v.proven = true
	}
	return v
}

// mayAct says whether the exporter may give its agent to JVMs now.
func (v *verdict) mayAct() bool {
	return v.configValid.Status == metav1.ConditionTrue && v.agentErr == "" && !v.breakerOpen
}

// why says why the exporter may not act now (reason and message), or ""
// when it may.
func (v *verdict) why() (reason, msg string) {
	switch {
	case v.agentErr != "":
		return v.agentReason, v.agentErr
	case v.configValid.Status != metav1.ConditionTrue:
		return v.configValid.Reason, v.configValid.Message
	case v.breakerOpen:
		return jmxv1alpha1.ReasonJVMEndedAfterInjection, "the circuit breaker is open until the exporter's spec or config changes (see its Degraded condition)"
	}
	return "", ""
}

// String is the verdict for a log line.
func (v *verdict) String() string {
	if reason, msg := v.why(); reason != "" {
		return fmt.Sprintf("may not act: %s: %s", reason, msg)
	}
	return "may act"
}

// configHashes names config as the operator does: sha is its SHA-256 in
// hex (the status' configSHA256), short the first 16 hex digits of it (the
// records' configHash, atstart.ShortHash, the one definition that
// atstart.ConfigHash also uses at start). Every config the operator names
// is named here.
func configHashes(config []byte) (sha, short string) {
	sum := sha256.Sum256(config)
	sha = hex.EncodeToString(sum[:])
	return sha, atstart.ShortHash(sha)
}

// sameConfig says whether a record's configHash, short, names the config
// whose SHA-256 is sha.
func sameConfig(short, sha string) bool { return short != "" && short == atstart.ShortHash(sha) }
