//! MQTT 5.0 reason codes (section 2.4), the subset each packet may carry, and the 3.1.1 return
//! codes of CONNACK and SUBACK expressed as the 5.0 codes that mean the same, so the broker
//! decides once and the codec speaks either version.

use super::error::MqttError;

/// The outcome of an operation, as numbered by MQTT 5.0. `0x00` is named "Success", "Normal
/// disconnection" or "Granted QoS 0" by the spec depending on the packet; here it is `Success`.
#[allow(missing_docs)] // Each variant is the spec's name for its number; the number is the doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum MqttReason {
    Success = 0x00,
    GrantedQos1 = 0x01,
    GrantedQos2 = 0x02,
    DisconnectWithWill = 0x04,
    NoMatchingSubscribers = 0x10,
    NoSubscriptionExisted = 0x11,
    ContinueAuthentication = 0x18,
    ReAuthenticate = 0x19,
    UnspecifiedError = 0x80,
    MalformedPacket = 0x81,
    ProtocolError = 0x82,
    ImplementationSpecificError = 0x83,
    UnsupportedProtocolVersion = 0x84,
    ClientIdentifierNotValid = 0x85,
    BadUserNameOrPassword = 0x86,
    NotAuthorized = 0x87,
    ServerUnavailable = 0x88,
    ServerBusy = 0x89,
    Banned = 0x8A,
    ServerShuttingDown = 0x8B,
    BadAuthenticationMethod = 0x8C,
    KeepAliveTimeout = 0x8D,
    SessionTakenOver = 0x8E,
    TopicFilterInvalid = 0x8F,
    TopicNameInvalid = 0x90,
    PacketIdentifierInUse = 0x91,
    PacketIdentifierNotFound = 0x92,
    ReceiveMaximumExceeded = 0x93,
    TopicAliasInvalid = 0x94,
    PacketTooLarge = 0x95,
    MessageRateTooHigh = 0x96,
    QuotaExceeded = 0x97,
    AdministrativeAction = 0x98,
    PayloadFormatInvalid = 0x99,
    RetainNotSupported = 0x9A,
    QosNotSupported = 0x9B,
    UseAnotherServer = 0x9C,
    ServerMoved = 0x9D,
    SharedSubscriptionsNotSupported = 0x9E,
    ConnectionRateExceeded = 0x9F,
    MaximumConnectTime = 0xA0,
    SubscriptionIdentifiersNotSupported = 0xA1,
    WildcardSubscriptionsNotSupported = 0xA2,
}

use MqttReason as R;

/// Every reason code, in numeric order: the inverse of `as u8`.
#[rustfmt::skip]
pub const ALL_REASONS: [MqttReason; 43] = [
    R::Success, R::GrantedQos1, R::GrantedQos2, R::DisconnectWithWill, R::NoMatchingSubscribers,
    R::NoSubscriptionExisted, R::ContinueAuthentication, R::ReAuthenticate, R::UnspecifiedError, R::MalformedPacket,
    R::ProtocolError, R::ImplementationSpecificError, R::UnsupportedProtocolVersion, R::ClientIdentifierNotValid,
    R::BadUserNameOrPassword, R::NotAuthorized, R::ServerUnavailable, R::ServerBusy, R::Banned, R::ServerShuttingDown,
    R::BadAuthenticationMethod, R::KeepAliveTimeout, R::SessionTakenOver, R::TopicFilterInvalid, R::TopicNameInvalid,
    R::PacketIdentifierInUse, R::PacketIdentifierNotFound, R::ReceiveMaximumExceeded, R::TopicAliasInvalid,
    R::PacketTooLarge, R::MessageRateTooHigh, R::QuotaExceeded, R::AdministrativeAction, R::PayloadFormatInvalid,
    R::RetainNotSupported, R::QosNotSupported, R::UseAnotherServer, R::ServerMoved,
    R::SharedSubscriptionsNotSupported, R::ConnectionRateExceeded, R::MaximumConnectTime,
    R::SubscriptionIdentifiersNotSupported, R::WildcardSubscriptionsNotSupported,
];

/// The reason codes one packet type may carry (MQTT 5.0 table 2-6), and its 3.1.1 return codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasonSet {
    /// CONNACK (3.2.2.2).
    Connack,
    /// PUBACK and PUBREC (3.4.2.1, 3.5.2.1).
    PublishAck,
    /// PUBREL and PUBCOMP (3.6.2.1, 3.7.2.1).
    PublishRelease,
    /// SUBACK (3.9.3).
    Suback,
    /// UNSUBACK (3.11.3).
    Unsuback,
    /// DISCONNECT (3.14.2.1).
    Disconnect,
    /// AUTH (3.15.2.1).
    Auth,
}

#[rustfmt::skip]
const CONNACK: &[MqttReason] = &[
    R::Success, R::UnspecifiedError, R::MalformedPacket, R::ProtocolError, R::ImplementationSpecificError,
    R::UnsupportedProtocolVersion, R::ClientIdentifierNotValid, R::BadUserNameOrPassword, R::NotAuthorized,
    R::ServerUnavailable, R::ServerBusy, R::Banned, R::BadAuthenticationMethod, R::TopicNameInvalid,
    R::PacketTooLarge, R::QuotaExceeded, R::PayloadFormatInvalid, R::RetainNotSupported, R::QosNotSupported,
    R::UseAnotherServer, R::ServerMoved, R::ConnectionRateExceeded,
];
#[rustfmt::skip]
const PUBLISH_ACK: &[MqttReason] = &[
    R::Success, R::NoMatchingSubscribers, R::UnspecifiedError, R::ImplementationSpecificError, R::NotAuthorized,
    R::TopicNameInvalid, R::PacketIdentifierInUse, R::QuotaExceeded, R::PayloadFormatInvalid,
];
const PUBLISH_RELEASE: &[MqttReason] = &[R::Success, R::PacketIdentifierNotFound];
#[rustfmt::skip]
const SUBACK: &[MqttReason] = &[
    R::Success, R::GrantedQos1, R::GrantedQos2, R::UnspecifiedError, R::ImplementationSpecificError, R::NotAuthorized,
    R::TopicFilterInvalid, R::PacketIdentifierInUse, R::QuotaExceeded, R::SharedSubscriptionsNotSupported,
    R::SubscriptionIdentifiersNotSupported, R::WildcardSubscriptionsNotSupported,
];
#[rustfmt::skip]
const UNSUBACK: &[MqttReason] = &[
    R::Success, R::NoSubscriptionExisted, R::UnspecifiedError, R::ImplementationSpecificError, R::NotAuthorized,
    R::TopicFilterInvalid, R::PacketIdentifierInUse,
];
#[rustfmt::skip]
const DISCONNECT: &[MqttReason] = &[
    R::Success, R::DisconnectWithWill, R::UnspecifiedError, R::MalformedPacket, R::ProtocolError,
    R::ImplementationSpecificError, R::NotAuthorized, R::ServerBusy, R::ServerShuttingDown, R::KeepAliveTimeout,
    R::SessionTakenOver, R::TopicFilterInvalid, R::TopicNameInvalid, R::ReceiveMaximumExceeded, R::TopicAliasInvalid,
    R::PacketTooLarge, R::MessageRateTooHigh, R::QuotaExceeded, R::AdministrativeAction, R::PayloadFormatInvalid,
    R::RetainNotSupported, R::QosNotSupported, R::UseAnotherServer, R::ServerMoved,
    R::SharedSubscriptionsNotSupported, R::ConnectionRateExceeded, R::MaximumConnectTime,
    R::SubscriptionIdentifiersNotSupported, R::WildcardSubscriptionsNotSupported,
];
const AUTH: &[MqttReason] = &[R::Success, R::ContinueAuthentication, R::ReAuthenticate];

/// CONNACK return codes of 3.1.1 (3.2.2.3), by number, as the 5.0 codes of the same meaning.
#[rustfmt::skip]
const CONNACK_V311: [MqttReason; 6] = [
    R::Success, R::UnsupportedProtocolVersion, R::ClientIdentifierNotValid, R::ServerUnavailable,
    R::BadUserNameOrPassword, R::NotAuthorized,
];

impl ReasonSet {
    /// The codes of this set, for tests and strategies.
    pub fn codes(self) -> &'static [MqttReason] {
        match self {
            ReasonSet::Connack => CONNACK,
            ReasonSet::PublishAck => PUBLISH_ACK,
            ReasonSet::PublishRelease => PUBLISH_RELEASE,
            ReasonSet::Suback => SUBACK,
            ReasonSet::Unsuback => UNSUBACK,
            ReasonSet::Disconnect => DISCONNECT,
            ReasonSet::Auth => AUTH,
        }
    }

    /// The codes this set can express in 3.1.1 (only CONNACK and SUBACK carry codes there).
    pub fn codes_v311(self) -> &'static [MqttReason] {
        match self {
            ReasonSet::Connack => &CONNACK_V311,
            ReasonSet::Suback => &SUBACK[..4],
            _ => &SUBACK[..1],
        }
    }

    /// Decodes a 5.0 reason code byte, refusing one this packet may not carry.
    pub(crate) fn decode(self, packet: &'static str, code: u8) -> Result<MqttReason, MqttError> {
        self.codes()
            .iter()
            .find(|reason| **reason as u8 == code)
            .copied()
            .ok_or(MqttError::InvalidReasonCode { packet, code })
    }

    /// Checks that `reason` may be sent in this packet (5.0).
    pub(crate) fn check(self, packet: &'static str, reason: MqttReason) -> Result<u8, MqttError> {
        self.decode(packet, reason as u8).map(|reason| reason as u8)
    }

    /// Decodes a 3.1.1 return code (CONNACK's 0..=5, SUBACK's 0, 1, 2, 0x80).
    pub(crate) fn decode_v311(self, packet: &'static str, code: u8) -> Result<MqttReason, MqttError> {
        match self {
            ReasonSet::Connack => CONNACK_V311.get(usize::from(code)).copied(),
            _ => self.codes_v311().iter().find(|reason| **reason as u8 == code).copied(),
        }
        .ok_or(MqttError::InvalidReasonCode { packet, code })
    }

    /// The 3.1.1 return code for `reason`, or an error if 3.1.1 has no code for it.
    pub(crate) fn encode_v311(self, packet: &'static str, reason: MqttReason) -> Result<u8, MqttError> {
        let codes = self.codes_v311();
        let position = codes.iter().position(|code| *code == reason);
        match (self, position) {
            (ReasonSet::Connack, Some(index)) => Ok(index as u8),
            (_, Some(_)) => Ok(reason as u8),
            (_, None) => Err(MqttError::InvalidReasonCode { packet, code: reason as u8 }),
        }
    }
}

impl MqttReason {
    /// The code for a byte, if MQTT 5.0 defines it.
    pub fn from_u8(code: u8) -> Option<MqttReason> {
        ALL_REASONS.iter().find(|reason| **reason as u8 == code).copied()
    }

    /// Whether the code reports a failure (0x80 and above), which ends an operation.
    pub fn is_error(self) -> bool {
        self as u8 >= 0x80
    }
}
