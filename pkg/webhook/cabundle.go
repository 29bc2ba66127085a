package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// injectBundle makes every webhook of the configuration that calls this
// manager's Service (or a URL) carry bundle, patching only the ones that
// differ. A webhook that calls another Service is another install's: its
// caBundle is left alone, so that two installs sharing a configuration
// name do not patch it back and forth without end.
func (m *CertManager) injectBundle(ctx context.Context, bundle []byte) error {
	configs := m.client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	cfg, err := configs.Get(ctx, m.o.WebhookConfigName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		m.markSeen(nil, time.Time{})
		return fmt.Errorf("webhook: MutatingWebhookConfiguration %s not found: it comes with the operator's manifests (or Helm chart); its caBundle is set once it exists", m.o.WebhookConfigName)
	}
	if err != nil {
		return fmt.Errorf("webhook: reading MutatingWebhookConfiguration %s: %w", m.o.WebhookConfigName, err)
	}
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	var ops []op
	var others []string
	for i, wh := range cfg.Webhooks {
		if svc := wh.ClientConfig.Service; svc != nil && (svc.Namespace != m.o.Namespace || svc.Name != m.o.ServiceName) {
			others = append(others, fmt.Sprintf("%s (Service %s/%s)", wh.Name, svc.Namespace, svc.Name))
			continue
		}
		if equalBundles(wh.ClientConfig.CABundle, bundle) {
			continue
		}
		// The test keeps the patch from landing on another webhook when
		// the list changed since the read.
		ops = append(ops,
			op{Op: "test", Path: fmt.Sprintf("/webhooks/%d/name", i), Value: wh.Name},
			op{Op: "add", Path: fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), Value: bundle})
	}
	if len(others) == len(cfg.Webhooks) {
		m.markSeen(nil, time.Time{})
		if len(others) == 0 {
			others = []string{"no webhooks"}
		}
		return fmt.Errorf("webhook: no webhook of MutatingWebhookConfiguration %s calls Service %s/%s (it has %s): another install's configuration of the same name? Give each install its own",
			cfg.Name, m.o.Namespace, m.o.ServiceName, strings.Join(others, ", "))
	}
	if len(ops) == 0 {
		m.markSeen(bundle, time.Now())
		return nil
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	if _, err := configs.Patch(ctx, cfg.Name, types.JSONPatchType, data, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		m.markSeen(nil, time.Time{})
		return fmt.Errorf("webhook: setting the caBundle of MutatingWebhookConfiguration %s: %w", cfg.Name, err)
	}
	m.log.WithField("webhookConfiguration", cfg.Name).Infof("webhook certificates: caBundle set (%d webhooks)", len(ops)/2)
	// Until now the configuration carried something else, even when it
	// carried this bundle before (an apply that reset it, say).
	m.markSeen(nil, time.Time{})
	m.markSeen(bundle, time.Now())
	return nil
}

// markSeen records that the configuration carries bundle (nil: something
// else), keeping the earlier time when it carried it already.
func (m *CertManager) markSeen(bundle []byte, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if bundle == nil {
		m.seenHash, m.seenAt = [sha256.Size]byte{}, time.Time{}
		return
	}
	h := sha256.Sum256(bundle)
	if h != m.seenHash || m.seenAt.IsZero() {
		m.seenHash, m.seenAt = h, now
	}
}
