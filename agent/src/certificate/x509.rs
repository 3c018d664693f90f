//! The little X.509 picolet writes and reads, in DER, without an X.509
//! library: the node's CSR (kube::bootstrap), the API port's self-signed
//! serving certificate ([`self_signed`]), the node's local client CA and
//! its client certificates ([`ca`], [`client`], [`signed_by`]), a
//! certificate's validity and its subject's CN and O (a client
//! certificate's user and groups).
//! Pure: ring signs, the caller stores.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use std::net::IpAddr;

use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair};

/// A DER TLV.
pub fn der(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    let n = body.len();
    if n < 0x80 {
        v.push(u8::try_from(n).unwrap_or(0));
    } else {
        let bytes: Vec<u8> = n
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        v.push(0x80 | u8::try_from(bytes.len()).unwrap_or(0));
        v.extend(bytes);
    }
    v.extend_from_slice(body);
    v
}

pub fn seq(parts: &[&[u8]]) -> Vec<u8> {
    der(0x30, &parts.concat())
}

// DER contents of the object identifiers used.
pub const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
pub const OID_PRIME256V1: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
pub const OID_ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
pub const OID_ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];
pub const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];

/// PEM of `der` with `label`, 64 characters a line.
pub fn pem(label: &str, der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// One DER element at the start of `b`: (tag, contents, rest).
pub fn read_der(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, b) = b.split_first()?;
    let (&first, b) = b.split_first()?;
    let (len, b) = if first < 0x80 {
        (usize::from(first), b)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || b.len() < n {
            return None;
        }
        let len = b[..n]
            .iter()
            .fold(0usize, |a, x| (a << 8) | usize::from(*x));
        (len, &b[n..])
    };
    if b.len() < len {
        return None;
    }
    Some((tag, &b[..len], &b[len..]))
}

/// Seconds since the epoch of an X.509 UTCTime (`YYMMDDHHMMSSZ`, years
/// 1950–2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
pub fn x509_time(tag: u8, v: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(v).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 => {
            let yy: i16 = s.get(..2)?.parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, s.get(2..)?)
        }
        0x18 => (s.get(..4)?.parse().ok()?, s.get(4..)?),
        _ => return None,
    };
    if rest.len() != 10 || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = |i: usize| rest.get(i..i + 2)?.parse::<i8>().ok();
    let t = jiff::civil::DateTime::new(year, n(0)?, n(2)?, n(4)?, n(6)?, n(8)?, 0).ok()?;
    Some(
        t.to_zoned(jiff::tz::TimeZone::UTC)
            .ok()?
            .timestamp()
            .as_second(),
    )
}

/// The validity (notBefore, notAfter; seconds since the epoch) of the
/// first certificate in `pem`.
pub fn validity(pem_text: &[u8]) -> Option<(i64, i64)> {
    use rustls::pki_types::pem::PemObject;
    let cert = rustls::pki_types::CertificateDer::pem_slice_iter(pem_text)
        .next()?
        .ok()?;
    let (validity, _) = validity_and_subject(cert.as_ref())?;
    let (t1, v1, r) = read_der(validity)?;
    let (t2, v2, _) = read_der(r)?;
    Some((x509_time(t1, v1)?, x509_time(t2, v2)?))
}

// Extensions of the certificates made here.
const OID_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x0f];
const OID_EXT_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x25];
const OID_BASIC_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x13];
const OID_SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];
const OID_EXTENSION_REQUEST: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e];
const OID_SERVER_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
const OID_CLIENT_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02];

/// An X.509 time for `secs` since the epoch: UTCTime through 2049,
/// GeneralizedTime after (RFC 5280 4.1.2.5).
pub fn x509_time_der(secs: i64) -> Vec<u8> {
    use jiff::Timestamp;
    let secs = secs.clamp(Timestamp::MIN.as_second(), Timestamp::MAX.as_second());
    let t = Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH);
    let year = t.to_zoned(jiff::tz::TimeZone::UTC).year();
    let clock = t.strftime("%m%d%H%M%SZ");
    if (1950..2050).contains(&year) {
        der(0x17, format!("{:02}{clock}", year % 100).as_bytes())
    } else {
        der(0x18, format!("{year:04}{clock}").as_bytes())
    }
}

/// A Name of one CN.
fn common_name(cn: &str) -> Vec<u8> {
    seq(&[&der(
        0x31,
        &seq(&[&der(0x06, OID_COMMON_NAME), &der(0x0c, cn.as_bytes())]),
    )])
}

fn extension(oid: &[u8], critical: bool, value: &[u8]) -> Vec<u8> {
    let flag = if critical {
        der(0x01, &[0xff])
    } else {
        Vec::new()
    };
    seq(&[&der(0x06, oid), &flag, &der(0x04, value)])
}

/// The subjectAltName extension's value: DNS `names` and `ips`.
pub fn subject_alt_names(names: &[String], ips: &[IpAddr]) -> Vec<u8> {
    let mut alt = Vec::new();
    for n in names {
        alt.extend(der(0x82, n.as_bytes()));
    }
    for ip in ips {
        match ip {
            IpAddr::V4(v4) => alt.extend(der(0x87, &v4.octets())),
            IpAddr::V6(v6) => alt.extend(der(0x87, &v6.octets())),
        }
    }
    der(0x30, &alt)
}

/// A PKCS#10 attribute asking for the subjectAltName extension (the
/// `extensionRequest` of a serving certificate's CSR).
pub fn san_request_attribute(alt_names: &[u8]) -> Vec<u8> {
    let ext = seq(&[&der(0x06, OID_SUBJECT_ALT_NAME), &der(0x04, alt_names)]);
    seq(&[&der(0x06, OID_EXTENSION_REQUEST), &der(0x31, &seq(&[&ext]))])
}

/// A random positive serial number.
fn serial() -> Result<[u8; 16], super::Error> {
    let mut serial = [0u8; 16];
    ring::rand::SecureRandom::fill(&SystemRandom::new(), &mut serial)
        .map_err(|_| super::Error::Random("a serial number"))?;
    // A positive INTEGER that does not start with a zero byte.
    serial[0] = (serial[0] & 0x7f) | 0x40;
    Ok(serial)
}

/// A certificate of `subject` (a Name) for the P-256 `public_key`,
/// issued by `issuer` (its Name, and its key that signs), from
/// `not_before` to `not_after`.
fn certificate(
    subject: &[u8],
    public_key: &[u8],
    issuer: (&[u8], &EcdsaKeyPair),
    extensions: &[u8],
    not_before: i64,
    not_after: i64,
) -> Result<Vec<u8>, super::Error> {
    let mut bits = vec![0u8];
    bits.extend_from_slice(public_key);
    let spki = seq(&[
        &seq(&[&der(0x06, OID_EC_PUBLIC_KEY), &der(0x06, OID_PRIME256V1)]),
        &der(0x03, &bits),
    ]);
    let algorithm = seq(&[&der(0x06, OID_ECDSA_SHA256)]);
    let tbs = seq(&[
        &der(0xa0, &der(0x02, &[2])),
        &der(0x02, &serial()?),
        &algorithm,
        issuer.0,
        &seq(&[&x509_time_der(not_before), &x509_time_der(not_after)]),
        subject,
        &spki,
        &der(0xa3, extensions),
    ]);
    let sig = issuer
        .1
        .sign(&SystemRandom::new(), &tbs)
        .map_err(|_| super::Error::Sign("certificate"))?;
    let mut sig_bits = vec![0u8];
    sig_bits.extend_from_slice(sig.as_ref());
    Ok(seq(&[&tbs, &algorithm, &der(0x03, &sig_bits)]))
}

/// A self-signed TLS server certificate (X.509 v3, ECDSA P-256 with
/// SHA-256) for `cn`, valid for the DNS `names` and `ips`, from
/// `not_before` to `not_after` (seconds since the epoch): what kubelet
/// makes when it is given no serving certificate.
pub fn self_signed(
    cn: &str,
    names: &[String],
    ips: &[IpAddr],
    key: &EcdsaKeyPair,
    not_before: i64,
    not_after: i64,
) -> Result<Vec<u8>, super::Error> {
    let alt = subject_alt_names(names, ips);
    let extensions = seq(&[
        // digitalSignature.
        &extension(OID_KEY_USAGE, true, &der(0x03, &[0x07, 0x80])),
        &extension(
            OID_EXT_KEY_USAGE,
            false,
            &seq(&[&der(0x06, OID_SERVER_AUTH)]),
        ),
        &extension(OID_BASIC_CONSTRAINTS, true, &seq(&[])),
        &extension(OID_SUBJECT_ALT_NAME, false, &alt),
    ]);
    let name = common_name(cn);
    certificate(
        &name,
        key.public_key().as_ref(),
        (&name, key),
        &extensions,
        not_before,
        not_after,
    )
}

/// A self-signed CA certificate for `cn` (keyCertSign, no intermediates
/// below it), from `not_before` to `not_after`.
pub fn ca(
    cn: &str,
    key: &EcdsaKeyPair,
    not_before: i64,
    not_after: i64,
) -> Result<Vec<u8>, super::Error> {
    let extensions = seq(&[
        // digitalSignature, keyCertSign.
        &extension(OID_KEY_USAGE, true, &der(0x03, &[0x02, 0x84])),
        // cA, pathLenConstraint 0.
        &extension(
            OID_BASIC_CONSTRAINTS,
            true,
            &seq(&[&der(0x01, &[0xff]), &der(0x02, &[0])]),
        ),
    ]);
    let name = common_name(cn);
    certificate(
        &name,
        key.public_key().as_ref(),
        (&name, key),
        &extensions,
        not_before,
        not_after,
    )
}

/// A TLS client certificate for user `cn` in groups `orgs` (the API
/// server's reading of a subject), for the P-256 `public_key`, issued by
/// the CA certificate [`ca`] made for `issuer_cn` with `issuer_key`.
pub fn client(
    cn: &str,
    orgs: &[String],
    public_key: &[u8],
    issuer_cn: &str,
    issuer_key: &EcdsaKeyPair,
    not_before: i64,
    not_after: i64,
) -> Result<Vec<u8>, super::Error> {
    let extensions = seq(&[
        // digitalSignature.
        &extension(OID_KEY_USAGE, true, &der(0x03, &[0x07, 0x80])),
        &extension(
            OID_EXT_KEY_USAGE,
            false,
            &seq(&[&der(0x06, OID_CLIENT_AUTH)]),
        ),
        &extension(OID_BASIC_CONSTRAINTS, true, &seq(&[])),
    ]);
    let mut rdns: Vec<Vec<u8>> = orgs
        .iter()
        .map(|o| {
            der(
                0x31,
                &seq(&[&der(0x06, OID_ORGANIZATION), &der(0x0c, o.as_bytes())]),
            )
        })
        .collect();
    rdns.push(der(
        0x31,
        &seq(&[&der(0x06, OID_COMMON_NAME), &der(0x0c, cn.as_bytes())]),
    ));
    let subject = der(0x30, &rdns.concat());
    certificate(
        &subject,
        public_key,
        (&common_name(issuer_cn), issuer_key),
        &extensions,
        not_before,
        not_after,
    )
}

/// Whether the certificate `cert` (DER) carries a signature of the P-256
/// key `issuer_public_key` (uncompressed point) over its contents: which
/// of several trusted CAs issued a certificate the handshake verified.
pub fn signed_by(cert: &[u8], issuer_public_key: &[u8]) -> bool {
    let check = || -> Option<bool> {
        let (_, body, _) = read_der(cert)?;
        let (_, _, after_tbs) = read_der(body)?;
        let tbs = &body[..body.len() - after_tbs.len()];
        let (_, algorithm, rest) = read_der(after_tbs)?;
        let (_, oid, _) = read_der(algorithm)?;
        let (tag, bits, _) = read_der(rest)?;
        let (&unused, sig) = bits.split_first()?;
        if oid != OID_ECDSA_SHA256 || tag != 0x03 || unused != 0 {
            return Some(false);
        }
        let key = ring::signature::UnparsedPublicKey::new(
            &ring::signature::ECDSA_P256_SHA256_ASN1,
            issuer_public_key,
        );
        Some(key.verify(tbs, sig).is_ok())
    };
    check().unwrap_or(false)
}

/// The elements of TBSCertificate up to and including the subject:
/// (validity, subject) contents.
fn validity_and_subject(cert: &[u8]) -> Option<(&[u8], &[u8])> {
    let (_, cert, _) = read_der(cert)?;
    let (_, tbs, _) = read_der(cert)?;
    let mut rest = tbs;
    // [0] version (optional), serial, signature algorithm, issuer.
    let (tag, _, r) = read_der(rest)?;
    rest = r;
    if tag == 0xa0 {
        rest = read_der(rest)?.2;
    }
    rest = read_der(rest)?.2;
    rest = read_der(rest)?.2;
    let (_, validity, rest) = read_der(rest)?;
    let (_, subject, _) = read_der(rest)?;
    Some((validity, subject))
}

/// The subject's common name and organizations of a certificate (DER): a
/// client certificate's user and groups, as the API server reads them.
pub fn subject(cert: &[u8]) -> Option<(String, Vec<String>)> {
    let (_, mut rdns) = validity_and_subject(cert)?;
    let (mut cn, mut orgs) = (None, Vec::new());
    while !rdns.is_empty() {
        let (_, set, rest) = read_der(rdns)?;
        rdns = rest;
        let mut atvs = set;
        while !atvs.is_empty() {
            let (_, atv, rest) = read_der(atvs)?;
            atvs = rest;
            let (_, oid, value) = read_der(atv)?;
            let (tag, value, _) = read_der(value)?;
            // UTF8String, PrintableString, IA5String, T61String.
            if !matches!(tag, 0x0c | 0x13 | 0x16 | 0x14) {
                continue;
            }
            let value = String::from_utf8(value.to_vec()).ok()?;
            if oid == OID_COMMON_NAME {
                cn = Some(value);
            } else if oid == OID_ORGANIZATION {
                orgs.push(value);
            }
        }
    }
    Some((cn.unwrap_or_default(), orgs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING;
    use rustls::pki_types::pem::PemObject;

    #[test]
    fn long_lengths_are_encoded_in_long_form() {
        assert_eq!(der(0x04, &[0; 3])[..2], [0x04, 3]);
        assert_eq!(der(0x04, &[0; 200])[..3], [0x04, 0x81, 200]);
        assert_eq!(der(0x04, &[0; 300])[..4], [0x04, 0x82, 0x01, 0x2c]);
    }

    #[test]
    fn times_both_ways() {
        assert_eq!(x509_time(0x17, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(x509_time(0x18, b"19700101000000Z"), Some(0));
        for secs in [
            0,
            951_782_400,
            1_795_652_735,
            2_524_607_999,
            2_524_608_000,
            4_102_444_800,
        ] {
            let d = x509_time_der(secs);
            assert_eq!(x509_time(d[0], &d[2..]), Some(secs), "{secs}");
        }
        assert_eq!(
            x509_time_der(2_524_608_000)[0],
            0x18,
            "2050 is a GeneralizedTime"
        );
    }

    #[test]
    fn a_self_signed_certificate_verifies_and_names_its_subject() {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).expect("key");
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, doc.as_ref(), &rng)
            .expect("key");
        let cert = self_signed(
            "pk-edge@1",
            &["pk-edge".into(), "localhost".into()],
            &["127.0.0.1".parse().expect("ip")],
            &key,
            1_000_000_000,
            2_000_000_000,
        )
        .expect("cert");
        assert_eq!(subject(&cert), Some(("pk-edge@1".into(), vec![])));
        let p = pem("CERTIFICATE", &cert);
        assert_eq!(validity(p.as_bytes()), Some((1_000_000_000, 2_000_000_000)));
        // rustls' verifier (webpki) accepts it as its own root for the names.
        let der = rustls::pki_types::CertificateDer::from(cert);
        let anchor = webpki_anchor(&der);
        let mut roots = rustls::RootCertStore::empty();
        roots.roots.push(anchor);
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            std::sync::Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .expect("verifier");
        let now = rustls::pki_types::UnixTime::since_unix_epoch(std::time::Duration::from_secs(
            1_500_000_000,
        ));
        for name in ["pk-edge", "localhost", "127.0.0.1"] {
            let sn = rustls::pki_types::ServerName::try_from(name).expect("name");
            rustls::client::danger::ServerCertVerifier::verify_server_cert(
                verifier.as_ref(),
                &der,
                &[],
                &sn,
                &[],
                now,
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let other = rustls::pki_types::ServerName::try_from("elsewhere").expect("name");
        assert!(
            rustls::client::danger::ServerCertVerifier::verify_server_cert(
                verifier.as_ref(),
                &der,
                &[],
                &other,
                &[],
                now,
            )
            .is_err()
        );
    }

    fn webpki_anchor(
        der: &rustls::pki_types::CertificateDer<'_>,
    ) -> rustls::pki_types::TrustAnchor<'static> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(der.clone()).expect("anchor");
        roots.roots.remove(0)
    }

    #[test]
    fn a_client_certificates_user_and_groups() {
        // openssl req -x509 -subj "/O=system:masters/O=dev/CN=kube-apiserver-kubelet-client"
        let pem_text = include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/client-two-orgs.pem"
        ));
        let der = rustls::pki_types::CertificateDer::pem_slice_iter(pem_text)
            .next()
            .expect("one")
            .expect("pem");
        assert_eq!(
            subject(der.as_ref()),
            Some((
                "kube-apiserver-kubelet-client".into(),
                vec!["system:masters".into(), "dev".into()]
            ))
        );
        assert_eq!(subject(b"\x30\x03\x02\x01\x00"), None);
    }
}
