// Package webhook runs a mutating admission webhook inside an operator,
// on every replica, with TLS the operator manages itself.
//
// A CertManager keeps a self-signed CA and a serving certificate for the
// webhook's Service in one Secret of the operator's namespace, replaces them
// before they expire, keeps the caBundle of one MutatingWebhookConfiguration
// equal to the Secret's bundle, and hands the current serving certificate
// to each TLS handshake (GetCertificate), so nothing restarts. Replicas
// started together agree through the apiserver: one creation succeeds, the
// others read it; a rotation step is one update guarded by the Secret's
// resourceVersion.
//
// A CA rotation never leaves a caller without trust: the new CA joins the
// bundle first, serving certificates come from it only after
// PropagationDelay (and once the configuration carries the bundle), and the
// old CA leaves the bundle after PropagationDelay again, when every replica
// serves the new certificate.
//
// A Server answers admission.k8s.io/v1 AdmissionReviews over HTTPS on the
// paths given to it, and fails open: a handler that panics or overruns its
// time allows the object unchanged with a warning.
//
// With ExternalCerts (cert-manager writes the Secret and injects the
// caBundle) the CertManager only reads and serves. See docs/webhook.md.
package webhook
