//! The text `ibv_devinfo` prints (rdma-core's libibverbs/examples/devinfo.c):
//! same field names, order, values and tabs.

use std::fmt::Write;

use erdma::port::{mtu_text, speed_text, vl_text, width_text};
use erdma::sys;
use erdma::{AtomicCap, GidType, Guid, LinkLayer, PhysState, PortState, Transport};

use super::report::{DeviceReport, GidReport, PortReport};

macro_rules! w {
    ($out:expr, $($arg:tt)*) => { let _ = write!($out, $($arg)*); };
}

fn flag_lines(out: &mut String, value: u64, names: &[(u64, &str)], unknown_fmt: fn(u64) -> String) {
    let mut known = 0u64;
    for (bit, name) in names {
        known |= bit;
        if value & bit != 0 {
            w!(out, "\t\t\t\t\t{name}\n");
        }
    }
    if value & !known != 0 {
        w!(
            out,
            "\t\t\t\t\tUnknown flags: {}\n",
            unknown_fmt(value & !known)
        );
    }
}

fn hex32_upper(v: u64) -> String {
    format!("0x{:X}", v as u32)
}

fn hex64_upper(v: u64) -> String {
    format!("0x{v:X}")
}

const DEVICE_CAP_FLAGS: &[(u64, &str)] = &[
    (sys::IBV_DEVICE_RESIZE_MAX_WR as u64, "RESIZE_MAX_WR"),
    (sys::IBV_DEVICE_BAD_PKEY_CNTR as u64, "BAD_PKEY_CNTR"),
    (sys::IBV_DEVICE_BAD_QKEY_CNTR as u64, "BAD_QKEY_CNTR"),
    (sys::IBV_DEVICE_RAW_MULTI as u64, "RAW_MULTI"),
    (sys::IBV_DEVICE_AUTO_PATH_MIG as u64, "AUTO_PATH_MIG"),
    (sys::IBV_DEVICE_CHANGE_PHY_PORT as u64, "CHANGE_PHY_PORT"),
    (
        sys::IBV_DEVICE_UD_AV_PORT_ENFORCE as u64,
        "UD_AV_PORT_ENFORCE",
    ),
    (
        sys::IBV_DEVICE_CURR_QP_STATE_MOD as u64,
        "CURR_QP_STATE_MOD",
    ),
    (sys::IBV_DEVICE_SHUTDOWN_PORT as u64, "SHUTDOWN_PORT"),
    (sys::IBV_DEVICE_INIT_TYPE as u64, "INIT_TYPE"),
    (
        sys::IBV_DEVICE_PORT_ACTIVE_EVENT as u64,
        "PORT_ACTIVE_EVENT",
    ),
    (sys::IBV_DEVICE_SYS_IMAGE_GUID as u64, "SYS_IMAGE_GUID"),
    (sys::IBV_DEVICE_RC_RNR_NAK_GEN as u64, "RC_RNR_NAK_GEN"),
    (sys::IBV_DEVICE_SRQ_RESIZE as u64, "SRQ_RESIZE"),
    (sys::IBV_DEVICE_N_NOTIFY_CQ as u64, "N_NOTIFY_CQ"),
    (sys::IBV_DEVICE_MEM_WINDOW as u64, "MEM_WINDOW"),
    (sys::IBV_DEVICE_UD_IP_CSUM as u64, "UD_IP_CSUM"),
    (sys::IBV_DEVICE_XRC as u64, "XRC"),
    (
        sys::IBV_DEVICE_MEM_MGT_EXTENSIONS as u64,
        "MEM_MGT_EXTENSIONS",
    ),
    (
        sys::IBV_DEVICE_MEM_WINDOW_TYPE_2A as u64,
        "MEM_WINDOW_TYPE_2A",
    ),
    (
        sys::IBV_DEVICE_MEM_WINDOW_TYPE_2B as u64,
        "MEM_WINDOW_TYPE_2B",
    ),
    (sys::IBV_DEVICE_RC_IP_CSUM as u64, "RC_IP_CSUM"),
    (sys::IBV_DEVICE_RAW_IP_CSUM as u64, "RAW_IP_CSUM"),
    (
        sys::IBV_DEVICE_MANAGED_FLOW_STEERING as u64,
        "MANAGED_FLOW_STEERING",
    ),
];

const ODP_TRANSPORT: &[(u64, &str)] = &[
    (sys::IBV_ODP_SUPPORT_SEND as u64, "SUPPORT_SEND"),
    (sys::IBV_ODP_SUPPORT_RECV as u64, "SUPPORT_RECV"),
    (sys::IBV_ODP_SUPPORT_WRITE as u64, "SUPPORT_WRITE"),
    (sys::IBV_ODP_SUPPORT_READ as u64, "SUPPORT_READ"),
    (sys::IBV_ODP_SUPPORT_ATOMIC as u64, "SUPPORT_ATOMIC"),
    (sys::IBV_ODP_SUPPORT_SRQ_RECV as u64, "SUPPORT_SRQ"),
];

const QPT_CAPS: &[(u64, &str)] = &[
    (1 << sys::IBV_QPT_RAW_PACKET, "SUPPORT_RAW_PACKET"),
    (1 << sys::IBV_QPT_UD, "SUPPORT_UD"),
];

fn odp_trans(out: &mut String, caps: u32) {
    if caps == 0 {
        w!(out, "\t\t\t\t\tNO SUPPORT\n");
    } else {
        flag_lines(out, caps.into(), ODP_TRANSPORT, hex32_upper);
    }
}

fn gid_line(out: &mut String, g: &GidReport, link_layer: u8) {
    // ibv_devinfo skips entries whose interface id (bytes 8..16) is zero.
    if g.gid.0[8..].iter().all(|b| *b == 0) {
        return;
    }
    let v2 = match g.gid_type {
        None => return, // type query failed: ibv_devinfo prints nothing
        Some(GidType::RoceV2) | Some(GidType::Unknown(_)) => true,
        Some(_) => false,
    };
    let suffix = if link_layer == sys::IBV_LINK_LAYER_ETHERNET as u8 {
        if v2 { ", RoCE v2" } else { ", RoCE v1" }
    } else {
        ""
    };
    if v2 {
        w!(out, "\t\t\tGID[{:>3}]:\t\t{}{suffix}\n", g.index, g.gid);
    } else {
        w!(
            out,
            "\t\t\tGID[{:>3}]:\t\t{}{suffix}\n",
            g.index,
            g.gid.to_hex_groups()
        );
    }
}

/// `print_hca_cap` of devinfo.c for one device. Returns the text and
/// whether everything could be read (a port or GID query failure stops the
/// output there, as in ibv_devinfo).
pub fn device_text(d: &DeviceReport, verbose: bool) -> (String, Option<String>) {
    let mut out = String::new();
    let a = &d.attr;
    let o = &a.orig_attr;
    w!(out, "hca_id:\t{}\n", d.name);
    w!(
        out,
        "\ttransport:\t\t\t{} ({})\n",
        Transport::from_raw(d.transport),
        d.transport
    );
    let fw = d.fw_ver();
    if !fw.is_empty() {
        w!(out, "\tfw_ver:\t\t\t\t{fw}\n");
    }
    w!(out, "\tnode_guid:\t\t\t{}\n", Guid::from_be(o.node_guid));
    w!(
        out,
        "\tsys_image_guid:\t\t\t{}\n",
        Guid::from_be(o.sys_image_guid)
    );
    w!(out, "\tvendor_id:\t\t\t0x{:04x}\n", o.vendor_id);
    w!(out, "\tvendor_part_id:\t\t\t{}\n", o.vendor_part_id as i32);
    w!(out, "\thw_ver:\t\t\t\t0x{:X}\n", o.hw_ver);
    if let Some(b) = &d.board_id {
        w!(out, "\tboard_id:\t\t\t{b}\n");
    }
    w!(out, "\tphys_port_cnt:\t\t\t{}\n", o.phys_port_cnt);
    if verbose {
        verbose_device(&mut out, d);
    }
    for p in &d.ports {
        port_text(&mut out, d, p, verbose);
        if let Some((i, e)) = &p.gid_error {
            return (
                out,
                Some(format!(
                    "Failed to query gid to port {}, index {i}: {e}",
                    p.port
                )),
            );
        }
        out.push('\n');
    }
    if let Some((p, e)) = &d.port_error {
        return (out, Some(format!("Failed to query port {p} props: {e}")));
    }
    (out, None)
}

fn verbose_device(out: &mut String, d: &DeviceReport) {
    let a = &d.attr;
    let o = &a.orig_attr;
    w!(out, "\tmax_mr_size:\t\t\t0x{:x}\n", o.max_mr_size);
    w!(out, "\tpage_size_cap:\t\t\t0x{:x}\n", o.page_size_cap);
    w!(out, "\tmax_qp:\t\t\t\t{}\n", o.max_qp);
    w!(out, "\tmax_qp_wr:\t\t\t{}\n", o.max_qp_wr);
    w!(out, "\tdevice_cap_flags:\t\t0x{:08x}\n", o.device_cap_flags);
    flag_lines(
        out,
        o.device_cap_flags.into(),
        DEVICE_CAP_FLAGS,
        hex32_upper,
    );
    w!(out, "\tmax_sge:\t\t\t{}\n", o.max_sge);
    w!(out, "\tmax_sge_rd:\t\t\t{}\n", o.max_sge_rd);
    w!(out, "\tmax_cq:\t\t\t\t{}\n", o.max_cq);
    w!(out, "\tmax_cqe:\t\t\t{}\n", o.max_cqe);
    w!(out, "\tmax_mr:\t\t\t\t{}\n", o.max_mr);
    w!(out, "\tmax_pd:\t\t\t\t{}\n", o.max_pd);
    w!(out, "\tmax_qp_rd_atom:\t\t\t{}\n", o.max_qp_rd_atom);
    w!(out, "\tmax_ee_rd_atom:\t\t\t{}\n", o.max_ee_rd_atom);
    w!(out, "\tmax_res_rd_atom:\t\t{}\n", o.max_res_rd_atom);
    w!(out, "\tmax_qp_init_rd_atom:\t\t{}\n", o.max_qp_init_rd_atom);
    w!(out, "\tmax_ee_init_rd_atom:\t\t{}\n", o.max_ee_init_rd_atom);
    w!(
        out,
        "\tatomic_cap:\t\t\t{} ({})\n",
        AtomicCap::from_raw(o.atomic_cap),
        o.atomic_cap
    );
    w!(out, "\tmax_ee:\t\t\t\t{}\n", o.max_ee);
    w!(out, "\tmax_rdd:\t\t\t{}\n", o.max_rdd);
    w!(out, "\tmax_mw:\t\t\t\t{}\n", o.max_mw);
    w!(out, "\tmax_raw_ipv6_qp:\t\t{}\n", o.max_raw_ipv6_qp);
    w!(out, "\tmax_raw_ethy_qp:\t\t{}\n", o.max_raw_ethy_qp);
    w!(out, "\tmax_mcast_grp:\t\t\t{}\n", o.max_mcast_grp);
    w!(out, "\tmax_mcast_qp_attach:\t\t{}\n", o.max_mcast_qp_attach);
    w!(
        out,
        "\tmax_total_mcast_qp_attach:\t{}\n",
        o.max_total_mcast_qp_attach
    );
    w!(out, "\tmax_ah:\t\t\t\t{}\n", o.max_ah);
    w!(out, "\tmax_fmr:\t\t\t{}\n", o.max_fmr);
    if o.max_fmr != 0 {
        w!(out, "\tmax_map_per_fmr:\t\t{}\n", o.max_map_per_fmr);
    }
    w!(out, "\tmax_srq:\t\t\t{}\n", o.max_srq);
    if o.max_srq != 0 {
        w!(out, "\tmax_srq_wr:\t\t\t{}\n", o.max_srq_wr);
        w!(out, "\tmax_srq_sge:\t\t\t{}\n", o.max_srq_sge);
    }
    w!(out, "\tmax_pkeys:\t\t\t{}\n", o.max_pkeys);
    w!(out, "\tlocal_ca_ack_delay:\t\t{}\n", o.local_ca_ack_delay);

    // print_odp_caps
    let odp = &a.odp_caps;
    w!(out, "\tgeneral_odp_caps:\n");
    flag_lines(
        out,
        odp.general_caps,
        &[
            (sys::IBV_ODP_SUPPORT as u64, "ODP_SUPPORT"),
            (sys::IBV_ODP_SUPPORT_IMPLICIT as u64, "ODP_SUPPORT_IMPLICIT"),
        ],
        hex64_upper,
    );
    w!(out, "\trc_odp_caps:\n");
    odp_trans(out, odp.per_transport_caps.rc_odp_caps);
    w!(out, "\tuc_odp_caps:\n");
    odp_trans(out, odp.per_transport_caps.uc_odp_caps);
    w!(out, "\tud_odp_caps:\n");
    odp_trans(out, odp.per_transport_caps.ud_odp_caps);
    w!(out, "\txrc_odp_caps:\n");
    odp_trans(out, a.xrc_odp_caps);

    if a.completion_timestamp_mask != 0 {
        w!(
            out,
            "\tcompletion timestamp_mask:\t\t\t0x{:016x}\n",
            a.completion_timestamp_mask
        );
    } else {
        w!(out, "\tcompletion_timestamp_mask not supported\n");
    }
    if a.hca_core_clock != 0 {
        w!(out, "\thca_core_clock:\t\t\t{}kHZ\n", a.hca_core_clock);
    } else {
        w!(out, "\tcore clock not supported\n");
    }
    if a.raw_packet_caps != 0 {
        w!(out, "\traw packet caps:\n");
        let r = a.raw_packet_caps;
        for (bit, name) in [
            (
                sys::IBV_RAW_PACKET_CAP_CVLAN_STRIPPING,
                "C-VLAN stripping offload",
            ),
            (sys::IBV_RAW_PACKET_CAP_SCATTER_FCS, "Scatter FCS offload"),
            (sys::IBV_RAW_PACKET_CAP_IP_CSUM, "IP csum offload"),
            (sys::IBV_RAW_PACKET_CAP_DELAY_DROP, "Delay drop"),
        ] {
            if r & bit != 0 {
                w!(out, "\t\t\t\t\t{name}\n");
            }
        }
    }
    w!(
        out,
        "\tdevice_cap_flags_ex:\t\t0x{:X}\n",
        a.device_cap_flags_ex
    );
    let ex = a.device_cap_flags_ex & 0xffff_ffff_0000_0000;
    flag_lines(
        out,
        ex,
        &[
            (sys::IBV_DEVICE_RAW_SCATTER_FCS, "RAW_SCATTER_FCS"),
            (
                sys::IBV_DEVICE_PCI_WRITE_END_PADDING,
                "PCI_WRITE_END_PADDING",
            ),
        ],
        hex64_upper,
    );
    // print_tso_caps
    w!(out, "\ttso_caps:\n");
    w!(out, "\t\tmax_tso:\t\t\t{}\n", a.tso_caps.max_tso as i32);
    if a.tso_caps.max_tso != 0 {
        w!(out, "\t\tsupported_qp:\n");
        flag_lines(out, a.tso_caps.supported_qpts.into(), QPT_CAPS, hex32_upper);
    }
    // print_rss_caps
    let rss = &a.rss_caps;
    w!(out, "\trss_caps:\n");
    w!(
        out,
        "\t\tmax_rwq_indirection_tables:\t\t\t{}\n",
        rss.max_rwq_indirection_tables
    );
    w!(
        out,
        "\t\tmax_rwq_indirection_table_size:\t\t\t{}\n",
        rss.max_rwq_indirection_table_size
    );
    w!(
        out,
        "\t\trx_hash_function:\t\t\t\t0x{:x}\n",
        rss.rx_hash_function
    );
    w!(
        out,
        "\t\trx_hash_fields_mask:\t\t\t\t0x{:X}\n",
        rss.rx_hash_fields_mask
    );
    if rss.supported_qpts != 0 {
        w!(out, "\t\tsupported_qp:\n");
        flag_lines(out, rss.supported_qpts.into(), QPT_CAPS, hex32_upper);
    }
    w!(out, "\tmax_wq_type_rq:\t\t\t{}\n", a.max_wq_type_rq);
    // print_packet_pacing_caps
    let pp = &a.packet_pacing_caps;
    w!(out, "\tpacket_pacing_caps:\n");
    w!(
        out,
        "\t\tqp_rate_limit_min:\t{}kbps\n",
        pp.qp_rate_limit_min
    );
    w!(
        out,
        "\t\tqp_rate_limit_max:\t{}kbps\n",
        pp.qp_rate_limit_max
    );
    if pp.qp_rate_limit_max != 0 {
        w!(out, "\t\tsupported_qp:\n");
        flag_lines(out, pp.supported_qpts.into(), QPT_CAPS, hex32_upper);
    }
    // print_tm_caps
    let tm = &a.tm_caps;
    if tm.max_num_tags != 0 {
        w!(out, "\tmax_rndv_hdr_size:\t\t{}\n", tm.max_rndv_hdr_size);
        w!(out, "\tmax_num_tags:\t\t\t{}\n", tm.max_num_tags);
        w!(out, "\tmax_ops:\t\t\t{}\n", tm.max_ops);
        w!(out, "\tmax_sge:\t\t\t{}\n", tm.max_sge);
        w!(out, "\tflags:\n");
        if tm.flags & sys::IBV_TM_CAP_RC != 0 {
            w!(out, "\t\t\t\t\tIBV_TM_CAP_RC\n");
        }
    } else {
        w!(out, "\ttag matching not supported\n");
    }
    // print_cq_moderation_caps
    let cm = &a.cq_mod_caps;
    if cm.max_cq_count != 0 && cm.max_cq_period != 0 {
        w!(out, "\n\tcq moderation caps:\n");
        w!(out, "\t\tmax_cq_count:\t{}\n", cm.max_cq_count);
        w!(out, "\t\tmax_cq_period:\t{} us\n\n", cm.max_cq_period);
    }
    if a.max_dm_size != 0 {
        w!(
            out,
            "\tmaximum available device memory:\t{}Bytes\n\n",
            a.max_dm_size
        );
    }
    w!(out, "\tnum_comp_vectors:\t\t{}\n", d.num_comp_vectors);
}

fn port_text(out: &mut String, d: &DeviceReport, p: &PortReport, verbose: bool) {
    let a = &p.attr;
    w!(out, "\t\tport:\t{}\n", p.port);
    w!(
        out,
        "\t\t\tstate:\t\t\t{} ({})\n",
        PortState::from_raw(a.state),
        a.state
    );
    w!(
        out,
        "\t\t\tmax_mtu:\t\t{} ({})\n",
        mtu_text(a.max_mtu),
        a.max_mtu
    );
    w!(
        out,
        "\t\t\tactive_mtu:\t\t{} ({})\n",
        mtu_text(a.active_mtu),
        a.active_mtu
    );
    w!(out, "\t\t\tsm_lid:\t\t\t{}\n", a.sm_lid);
    w!(out, "\t\t\tport_lid:\t\t{}\n", a.lid);
    w!(out, "\t\t\tport_lmc:\t\t0x{:02x}\n", a.lmc);
    w!(
        out,
        "\t\t\tlink_layer:\t\t{}\n",
        LinkLayer::from_raw(a.link_layer)
    );
    if !verbose {
        return;
    }
    w!(out, "\t\t\tmax_msg_sz:\t\t0x{:x}\n", a.max_msg_sz);
    w!(out, "\t\t\tport_cap_flags:\t\t0x{:08x}\n", a.port_cap_flags);
    w!(out, "\t\t\tport_cap_flags2:\t0x{:04x}\n", a.port_cap_flags2);
    w!(
        out,
        "\t\t\tmax_vl_num:\t\t{} ({})\n",
        vl_text(a.max_vl_num),
        a.max_vl_num
    );
    w!(out, "\t\t\tbad_pkey_cntr:\t\t0x{:x}\n", a.bad_pkey_cntr);
    w!(out, "\t\t\tqkey_viol_cntr:\t\t0x{:x}\n", a.qkey_viol_cntr);
    w!(out, "\t\t\tsm_sl:\t\t\t{}\n", a.sm_sl);
    w!(out, "\t\t\tpkey_tbl_len:\t\t{}\n", a.pkey_tbl_len);
    w!(out, "\t\t\tgid_tbl_len:\t\t{}\n", a.gid_tbl_len);
    w!(out, "\t\t\tsubnet_timeout:\t\t{}\n", a.subnet_timeout);
    w!(out, "\t\t\tinit_type_reply:\t{}\n", a.init_type_reply);
    w!(
        out,
        "\t\t\tactive_width:\t\t{}X ({})\n",
        width_text(a.active_width),
        a.active_width
    );
    w!(
        out,
        "\t\t\tactive_speed:\t\t{} ({})\n",
        speed_text(a.active_speed),
        a.active_speed
    );
    if d.transport == sys::IBV_TRANSPORT_IB {
        w!(
            out,
            "\t\t\tphys_state:\t\t{} ({})\n",
            PhysState::from_raw(a.phys_state),
            a.phys_state
        );
    }
    for g in &p.gids {
        gid_line(out, g, a.link_layer);
    }
}

/// `ibv_devinfo -l`.
pub fn list_text(names: &[String]) -> String {
    let mut out = format!(
        "{} HCA{} found:\n",
        names.len(),
        if names.len() == 1 { "" } else { "s" }
    );
    for n in names {
        w!(out, "\t{n}\n");
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rxe_like() -> DeviceReport {
        let mut attr = sys::ibv_device_attr_ex::default();
        let o = &mut attr.orig_attr;
        o.node_guid = 0x0200_0aff_fe63_0001u64.to_be();
        o.sys_image_guid = 0;
        o.vendor_id = 0xffffff;
        o.phys_port_cnt = 1;
        o.max_mr_size = u64::MAX;
        o.page_size_cap = 0xffff_f000;
        o.max_qp = 1_048_560;
        o.device_cap_flags = 0x0121_3476;
        o.atomic_cap = sys::IBV_ATOMIC_HCA;
        attr.device_cap_flags_ex = 0x3_0121_3476;
        let port = sys::ibv_port_attr {
            state: sys::IBV_PORT_ACTIVE,
            max_mtu: 5,
            active_mtu: 3,
            gid_tbl_len: 1024,
            max_msg_sz: 0x8000_0000,
            link_layer: sys::IBV_LINK_LAYER_ETHERNET as u8,
            active_width: 1,
            active_speed: 1,
            phys_state: 5,
            ..Default::default()
        };
        DeviceReport {
            name: "rxe0".into(),
            transport: 0,
            attr,
            board_id: None,
            num_comp_vectors: 1,
            ports: vec![PortReport {
                port: 1,
                attr: port,
                gids: vec![
                    GidReport {
                        index: 0,
                        gid: "fe80::aff:fe63:1".parse().unwrap(),
                        gid_type: Some(GidType::RoceV2),
                        netdev: Some("veth0".into()),
                    },
                    GidReport {
                        index: 1,
                        gid: "::ffff:10.99.0.1".parse().unwrap(),
                        gid_type: Some(GidType::RoceV2),
                        netdev: Some("veth0".into()),
                    },
                ],
                gid_error: None,
            }],
            port_error: None,
        }
    }

    #[test]
    fn short_form() {
        let (t, err) = device_text(&rxe_like(), false);
        assert!(err.is_none());
        let want = "hca_id:\trxe0\n\
            \ttransport:\t\t\tInfiniBand (0)\n\
            \tnode_guid:\t\t\t0200:0aff:fe63:0001\n\
            \tsys_image_guid:\t\t\t0000:0000:0000:0000\n\
            \tvendor_id:\t\t\t0xffffff\n\
            \tvendor_part_id:\t\t\t0\n\
            \thw_ver:\t\t\t\t0x0\n\
            \tphys_port_cnt:\t\t\t1\n\
            \t\tport:\t1\n\
            \t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\
            \t\t\tmax_mtu:\t\t4096 (5)\n\
            \t\t\tactive_mtu:\t\t1024 (3)\n\
            \t\t\tsm_lid:\t\t\t0\n\
            \t\t\tport_lid:\t\t0\n\
            \t\t\tport_lmc:\t\t0x00\n\
            \t\t\tlink_layer:\t\tEthernet\n\n";
        assert_eq!(t, want);
    }

    #[test]
    fn verbose_form_details() {
        let (t, _) = device_text(&rxe_like(), true);
        assert!(t.contains("\tmax_mr_size:\t\t\t0xffffffffffffffff\n"));
        assert!(t.contains("\tdevice_cap_flags:\t\t0x01213476\n"));
        assert!(t.contains("\t\t\t\t\tBAD_PKEY_CNTR\n"));
        assert!(
            t.contains("\t\t\t\t\tUnknown flags: 0x1200000\n") || t.contains("MEM_MGT_EXTENSIONS")
        );
        assert!(t.contains("\tatomic_cap:\t\t\tATOMIC_HCA (1)\n"));
        assert!(t.contains("\trc_odp_caps:\n\t\t\t\t\tNO SUPPORT\n"));
        assert!(t.contains("\tcompletion_timestamp_mask not supported\n"));
        assert!(t.contains("\tdevice_cap_flags_ex:\t\t0x301213476\n"));
        assert!(t.contains("\t\t\t\t\tUnknown flags: 0x300000000\n"));
        assert!(t.contains("\ttag matching not supported\n"));
        assert!(t.contains("\t\t\tmax_msg_sz:\t\t0x80000000\n"));
        assert!(t.contains("\t\t\tactive_width:\t\t1X (1)\n"));
        assert!(t.contains("\t\t\tactive_speed:\t\t2.5 Gbps (1)\n"));
        assert!(t.contains("\t\t\tphys_state:\t\tLINK_UP (5)\n"));
        assert!(t.contains("\t\t\tGID[  0]:\t\tfe80::aff:fe63:1, RoCE v2\n"));
        assert!(t.contains("\t\t\tGID[  1]:\t\t::ffff:10.99.0.1, RoCE v2\n"));
        assert!(t.ends_with("RoCE v2\n\n"));
    }

    #[test]
    fn iwarp_gids_and_phys_state() {
        let mut d = rxe_like();
        d.transport = 1;
        d.ports[0].gids = vec![
            GidReport {
                index: 0,
                gid: "200:a63:101::".parse().unwrap(),
                gid_type: Some(GidType::Iwarp),
                netdev: None,
            },
            GidReport {
                index: 1,
                gid: "fe80::1".parse().unwrap(),
                gid_type: Some(GidType::Iwarp),
                netdev: None,
            },
        ];
        let (t, _) = device_text(&d, true);
        assert!(t.contains("\ttransport:\t\t\tiWARP (1)\n"));
        assert!(
            !t.contains("phys_state"),
            "only printed for InfiniBand transport"
        );
        // Zero interface id: skipped, as ibv_devinfo does.
        assert!(!t.contains("GID[  0]"));
        assert!(
            t.contains("\t\t\tGID[  1]:\t\tfe80:0000:0000:0000:0000:0000:0000:0001, RoCE v1\n")
        );
    }

    #[test]
    fn errors_stop_the_output() {
        let mut d = rxe_like();
        d.ports[0].gid_error = Some((3, "boom".into()));
        let (t, e) = device_text(&d, true);
        assert_eq!(
            e.as_deref(),
            Some("Failed to query gid to port 1, index 3: boom")
        );
        assert!(!t.ends_with("\n\n"));
    }

    #[test]
    fn list() {
        assert_eq!(list_text(&["rxe0".into()]), "1 HCA found:\n\trxe0\n\n");
        assert_eq!(list_text(&[]), "0 HCAs found:\n\n");
    }
}
