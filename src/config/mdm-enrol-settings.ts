/**
 * MDM enrolment's settings (issue 23 part C; docs/operations.md "Configuration"): the profile's server URL
 * and push topic, the MDM CA that issues device identities, and the optional profile signing identity.
 * Their rules, read together, are config/mdm-enrol-config.ts'; coordinator-settings.ts includes this table.
 */
import type { SettingTable } from "./settings.ts";

export const MDM_ENROL_SETTINGS = {
  mdmServerUrl: {
    flag: "mdm-server-url",
    env: "UMBRA_MDM_SERVER_URL",
    kind: "string",
    help: "NanoMDM's public check-in URL (https), the profile's ServerURL and CheckInURL; set: MDM enrolment on",
  },
  mdmTopic: { flag: "mdm-topic", env: "UMBRA_MDM_TOPIC", kind: "string", help: "the APNs MDM push topic (com.apple.mgmt.External.<uuid>)" },
  mdmCaCert: { flag: "mdm-ca-cert", env: "UMBRA_MDM_CA_CERT", kind: "string", help: "PEM file of the MDM CA (NanoMDM's -ca)" },
  mdmCaKey: { flag: "mdm-ca-key", env: "UMBRA_MDM_CA_KEY", kind: "string", secret: true, help: "the MDM CA's RSA private key (PEM)" },
  mdmProfileSigningP12File: {
    flag: "mdm-profile-signing-p12-file",
    env: "UMBRA_MDM_PROFILE_SIGNING_P12_FILE",
    kind: "string",
    help: "PKCS#12 identity (RSA) that signs enrolment profiles (CMS); unset: unsigned profiles",
  },
  mdmProfileSigningP12Password: {
    flag: "mdm-profile-signing-p12-password",
    env: "UMBRA_MDM_PROFILE_SIGNING_P12_PASSWORD",
    kind: "string",
    secret: true,
    help: "the signing PKCS#12's password",
  },
} as const satisfies SettingTable;

export type MdmEnrolSettingName = keyof typeof MDM_ENROL_SETTINGS;
export const MDM_ENROL_DERIVED = Object.keys(MDM_ENROL_SETTINGS) as readonly MdmEnrolSettingName[];
