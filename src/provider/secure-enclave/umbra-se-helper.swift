// umbra-se-helper: holds the provider's identity key in the Mac's Secure Enclave and signs on request.
// The private key never leaves the chip; the file below holds only CryptoKit's opaque key handle, which
// no other machine (and no other Secure Enclave) can use.
//
// Build (Xcode command line tools, macOS 13+ on Apple Silicon):
//   swiftc -O -o umbra-se-helper src/provider/secure-enclave/umbra-se-helper.swift
// Run: umbra-se-helper [KEY_FILE]   (default ~/Library/Application Support/Umbra/identity.se-key)
//
// Protocol (src/provider/identity.ts): one JSON object per line on stdin, one answer per line on stdout.
//   {"id": n, "op": "public_key"}                  -> {"id": n, "public_key": "<base64 x9.63, 65 bytes>"}
//   {"id": n, "op": "sign", "message": "<base64>"} -> {"id": n, "signature": "<base64 DER>"}
//   anything else                                  -> {"id": n, "error": "<text>"}
// Signatures are ECDSA P-256 over SHA-256(message) (CryptoKit hashes Data inputs with SHA-256).
// Diagnostics go to stderr only.
import CryptoKit
import Foundation

func fail(_ message: String) -> Never {
    FileHandle.standardError.write("umbra-se-helper: \(message)\n".data(using: .utf8)!)
    exit(1)
}

func loadOrCreateKey(at url: URL) -> SecureEnclave.P256.Signing.PrivateKey {
    guard SecureEnclave.isAvailable else { fail("this Mac has no Secure Enclave") }
    if let handle = try? Data(contentsOf: url) {
        do { return try SecureEnclave.P256.Signing.PrivateKey(dataRepresentation: handle) } catch {
            fail("the key file \(url.path) is not a Secure Enclave key of this Mac")
        }
    }
    do {
        let key = try SecureEnclave.P256.Signing.PrivateKey()
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try key.dataRepresentation.write(to: url, options: [.atomic, .completeFileProtection])
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: url.path)
        return key
    } catch {
        fail("cannot create a Secure Enclave key: \(error)")
    }
}

func reply(_ object: [String: Any]) {
    guard let data = try? JSONSerialization.data(withJSONObject: object) else { return }
    FileHandle.standardOutput.write(data)
    FileHandle.standardOutput.write("\n".data(using: .utf8)!)
}

let defaultPath = FileManager.default.homeDirectoryForCurrentUser
    .appendingPathComponent("Library/Application Support/Umbra/identity.se-key")
let keyURL = CommandLine.arguments.count > 1 ? URL(fileURLWithPath: CommandLine.arguments[1]) : defaultPath
let key = loadOrCreateKey(at: keyURL)

while let line = readLine(strippingNewline: true) {
    guard let data = line.data(using: .utf8),
          let request = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any],
          let id = request["id"] as? Int
    else { continue }
    switch request["op"] as? String {
    case "public_key":
        reply(["id": id, "public_key": key.publicKey.x963Representation.base64EncodedString()])
    case "sign":
        guard let text = request["message"] as? String, let message = Data(base64Encoded: text) else {
            reply(["id": id, "error": "message is not base64"])
            continue
        }
        do {
            reply(["id": id, "signature": try key.signature(for: message).derRepresentation.base64EncodedString()])
        } catch {
            reply(["id": id, "error": "the Secure Enclave refused to sign"])
        }
    default:
        reply(["id": id, "error": "unknown op"])
    }
}
